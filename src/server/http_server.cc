#include "server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <thread>

#include "base/log.h"
#include "server/chat_prompt.h"
#include "server/connection.h"
#include "server/generation_session.h"
#include "server/response_format.h"
#include "server/structured_output.h"
#include "server/webui.h"
#include "tokenizer/utf8.h"

namespace glint::server {
namespace {

using Clock = std::chrono::steady_clock;

// Per-connection-thread notes for the request log line (the logger runs on the handler's thread).
thread_local Clock::time_point t_request_start;
thread_local std::string t_log_note;

constexpr const char* kJson = "application/json";

void Reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), kJson);
}

void ReplyError(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  if (error.status == 429 || error.status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorBody(error), kJson);
}

std::string StatusText(int status) {
  switch (status) {
    case 400:
      return "the request is malformed";
    case 404:
      return "no such endpoint";
    case 405:
      return "method not allowed";
    case 408:
      return "the request took too long to arrive";
    case 413:
      return "the request body is too large";
    case 414:
      return "the request URI is too long";
    case 431:
      return "the request headers are too large";
    default:
      return "request failed";
  }
}

// A ClientConnection over an httplib response stream (streaming) or the bare socket (non-streaming).
class HttpClient final : public ClientConnection {
 public:
  HttpClient(httplib::DataSink* sink, int socket) : sink_(sink), socket_(socket) {}
  bool Write(std::string_view data) override { return sink_ != nullptr && sink_->write(data.data(), data.size()); }
  bool Alive() override { return socket_ < 0 || !PeerClosed(socket_); }

 private:
  httplib::DataSink* sink_;
  int socket_;
};

void ServeWebAsset(const WebAsset& asset, httplib::Response& res) {
  for (const auto& [name, value] : WebAssetHeaders()) res.set_header(std::string(name), std::string(value));
  res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
}

int SocketOf(const httplib::Request& req) {
  return FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited whatever the contents; the length difference is folded in.
  const size_t length = std::max(a.size(), b.size());
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned char>(x ^ y);
  }
  return difference == 0;
}

class HttpServer::Impl {
 public:
  Impl(ServerOptions options, const Tokenizer& tokenizer, const ChatTemplate* chat_template, GenerationBackend& backend)
      : options_(std::move(options)),
        tokenizer_(tokenizer),
        chat_template_(chat_template),
        backend_(backend),
        registry_(backend.max_running_sequences() + options_.max_queued_sequences) {
    if (options_.model_names.empty()) options_.model_names = {"glint"};
    if (options_.policy.vocab_size == 0) options_.policy.vocab_size = tokenizer_.vocab_size();
    SetUp();
  }

  Status Bind() {
    // httplib's listen backlog is fixed at 5 in Debian's build; a burst of connections would see SYNs dropped and
    // retried a second later. Listening again on the same socket raises the backlog (Linux allows it).
    server_.set_socket_options([this](socket_t socket) {
      int yes = 1;
      setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_socket_ = socket;
    });
    if (options_.port == 0) {
      port_ = server_.bind_to_any_port(options_.host);
      if (port_ <= 0) return IoError("cannot bind ", options_.host, " on any port");
    } else {
      if (!server_.bind_to_port(options_.host, options_.port)) {
        return IoError("cannot bind ", options_.host, ":", options_.port, " (in use, or the host does not resolve)");
      }
      port_ = options_.port;
    }
    if (listen_socket_ >= 0) ::listen(listen_socket_, 1024);
    return Status::Ok();
  }

  int port() const { return port_; }

  Status Run() {
    if (port_ <= 0) return FailedPrecondition("Run() before a successful Bind()");
    if (!server_.listen_after_bind() && !shutting_down_.load()) return IoError("the server stopped unexpectedly");
    return Status::Ok();
  }

  void Shutdown() {
    if (shutting_down_.exchange(true)) return;
    LogInfo("shutting down: no new requests; waiting up to ", options_.shutdown_grace_seconds,
            " s for in-flight requests");
    registry_.Drain();  // new generation requests get 503 from here on
    server_.stop();     // stop accepting; idle keep-alive connections close
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options_.shutdown_grace_seconds * 1000));
    while (registry_.requests() > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::vector<GenerationId> left = registry_.Drain();
    if (!left.empty()) LogInfo("cancelling ", left.size(), " requests still running after the grace period");
    for (GenerationId id : left) backend_.Cancel(id);
  }

  const ServerMetrics& metrics() const { return metrics_; }

 private:
  void SetUp() {
    const size_t max_connections = static_cast<size_t>(std::max(1, options_.max_connections));
    server_.new_task_queue = [this, max_connections] {
      return new ConnectionPool(max_connections, max_connections, &metrics_.connections_active());
    };
    server_.set_payload_max_length(options_.max_body_bytes);
    server_.set_read_timeout(options_.read_timeout_seconds, 0);
    server_.set_write_timeout(options_.write_timeout_seconds, 0);
    server_.set_keep_alive_timeout(options_.keep_alive_seconds);
    server_.set_keep_alive_max_count(1000);
    server_.set_tcp_nodelay(true);

    server_.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return PreRoute(req, res); });
    server_.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
          if (res.body.empty() && !res.is_chunked_content_provider_) {
            ApiError error{res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                           StrCat(StatusText(res.status), ": ", req.method, " ", req.path), "", ""};
            if (res.status == 404) error.code = "not_found";
            res.set_content(ErrorBody(error), kJson);
            AddCors(req, res);
          }
          return httplib::Server::HandlerResponse::Handled;
        }));
    server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      std::string what = "internal error";
      try {
        if (error) std::rethrow_exception(error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {  // anything thrown by a handler becomes a 500, never a crash
      }
      LogError("request handler failed: ", what);
      ReplyError(res, ApiError{500, "server_error", StrCat("internal error: ", what), "", ""});
    });
    server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) { LogRequest(req, res); });

    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      Count("/health", shutting_down_ ? 503 : 200);
      if (shutting_down_) return ReplyError(res, ApiError{503, "server_error", "shutting down", "", ""});
      Reply(res, 200, {{"status", "ok"}});
    });
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { Models(res); });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      Count("/metrics", 200);
      res.set_content(metrics_.Render(backend_.Metrics(), options_.model_names[0]),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { Chat(req, res); });
    server_.Post("/v1/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { Completion(req, res); });
    server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
    server_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
    // The right path with the wrong method is a 405, not a 404.
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
      server_.Get(path,
                  [this](const httplib::Request& req, httplib::Response& res) { MethodNotAllowed(req, res, "POST"); });
    }
    for (const char* path : {"/health", "/v1/models", "/metrics"}) {
      server_.Post(path,
                   [this](const httplib::Request& req, httplib::Response& res) { MethodNotAllowed(req, res, "GET"); });
    }
    server_.Options(".*", [this](const httplib::Request& req, httplib::Response& res) { Preflight(req, res); });
  }

  void Count(const std::string& endpoint, int status) { metrics_.CountHttpRequest(endpoint, status); }

  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    t_log_note.clear();
    if (ConnectionPool::IsRejectThread()) {
      res.set_header("Connection", "close");
      ReplyError(res, ApiError{503, "server_error",
                               StrCat("too many connections (limit ", options_.max_connections, "); retry later"), "",
                               "too_many_connections"});
      return httplib::Server::HandlerResponse::Handled;
    }
    size_t header_bytes = req.target.size();
    for (const auto& [key, value] : req.headers) header_bytes += key.size() + value.size() + 4;
    if (header_bytes > options_.max_header_bytes) {
      ReplyError(res, ApiError{431, "invalid_request_error",
                               StrCat("the request headers are ", header_bytes, " bytes; at most ",
                                      options_.max_header_bytes, " are accepted"),
                               "", "headers_too_large"});
      return httplib::Server::HandlerResponse::Handled;
    }
    // The chat page (webui.h) needs no API key: it is the same for everyone and asks for the key itself.
    const bool read = req.method == "GET" || req.method == "HEAD";
    if (const WebAsset* asset = options_.webui && read ? FindWebAsset(req.path) : nullptr) {
      ServeWebAsset(*asset, res);
      Count(std::string(asset->path), 200);
      return httplib::Server::HandlerResponse::Handled;
    }
    AddCors(req, res);
    if (req.method == "OPTIONS" || req.path == "/health" || options_.api_key.empty()) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string authorization = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool bearer = authorization.size() > kBearer.size() && authorization.compare(0, kBearer.size(), kBearer) == 0;
    if (!bearer || !ConstantTimeEquals(std::string_view(authorization).substr(kBearer.size()), options_.api_key)) {
      Count(req.path, 401);
      res.set_header("WWW-Authenticate", "Bearer");
      ReplyError(res, ApiError{401, "authentication_error",
                               bearer ? "invalid API key" : "missing API key: send 'Authorization: Bearer <key>'", "",
                               "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  bool OriginAllowed(const std::string& origin) const {
    for (const std::string& allowed : options_.allowed_origins) {
      if (allowed == "*" || allowed == origin) return true;
    }
    return false;
  }

  void AddCors(const httplib::Request& req, httplib::Response& res) const {
    if (options_.allowed_origins.empty()) return;
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || !OriginAllowed(origin)) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }

  void Preflight(const httplib::Request& req, httplib::Response& res) {
    if (options_.allowed_origins.empty() || !OriginAllowed(req.get_header_value("Origin"))) {
      Count("OPTIONS", 405);
      return ReplyError(res, ApiError{405, "invalid_request_error", "CORS is not enabled for this origin", "", ""});
    }
    Count("OPTIONS", 204);
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "600");
  }

  void MethodNotAllowed(const httplib::Request& req, httplib::Response& res, const char* allowed) {
    Count(req.path, 405);
    res.set_header("Allow", allowed);
    ReplyError(res, ApiError{405, "invalid_request_error", StrCat(req.method, " ", req.path, ": use ", allowed), "",
                             "method_not_allowed"});
  }

  void LogRequest(const httplib::Request& req, const httplib::Response& res) {
    if (!options_.log_requests) return;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count();
    LogInfo(req.remote_addr, ":", req.remote_port, " ", req.method, " ", req.path, " ", res.status, " ",
            static_cast<int64_t>(ms), " ms", t_log_note.empty() ? "" : " ", t_log_note);
  }

  // The model field must name the served model (404 otherwise), as in OpenAI's API.
  std::optional<ApiError> CheckModel(const std::optional<std::string>& model) const {
    if (!model) return std::nullopt;
    for (const std::string& name : options_.model_names) {
      if (*model == name) return std::nullopt;
    }
    return ApiError{
        404, "invalid_request_error",
        StrCat("the model '", *model, "' does not exist; this server serves '", options_.model_names[0], "'"), "model",
        "model_not_found"};
  }

  void Models(httplib::Response& res) {
    Count("/v1/models", 200);
    Json data = Json::array();
    for (const std::string& name : options_.model_names) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(start_time_)},
                      {"owned_by", "glint"},
                      {"root", options_.model_names[0]},
                      {"max_model_len", backend_.max_model_len()}});
    }
    Reply(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  }

  GenerationRequest BaseRequest(const SamplingFields& fields) const {
    GenerationRequest request;
    request.sampling = fields.sampling;
    request.max_tokens = fields.max_tokens.value_or(-1);
    request.stop_strings = fields.stop;
    request.stop_token_ids = fields.stop_token_ids;
    request.ignore_eos = fields.ignore_eos;
    request.n = fields.n;
    return request;
  }

  std::optional<ApiError> CheckContext(size_t prompt_tokens, const SamplingFields& fields, const char* param) const {
    const int64_t limit = backend_.max_model_len();
    const int64_t length = static_cast<int64_t>(prompt_tokens);
    if (length >= limit) {
      return BadRequest(
          StrCat("the prompt has ", length, " tokens but this model's context is ", limit, " tokens (prompt + output)"),
          param, "context_length_exceeded");
    }
    // max_tokens > limit − length, not length + max_tokens > limit: the sum overflows for max_tokens near 2^63.
    if (fields.max_tokens && *fields.max_tokens > limit - length) {
      return BadRequest(StrCat("the prompt (", length, " tokens) plus max_tokens (", *fields.max_tokens,
                               ") exceeds this model's context of ", limit, " tokens"),
                        "max_tokens", "context_length_exceeded");
    }
    return std::nullopt;
  }

  // Runs a session: streaming through a chunked provider, or collecting into one JSON body.
  void Respond(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
               std::shared_ptr<GenerationSession> session, bool stream, bool include_usage) {
    const int socket = SocketOf(req);
    if (stream) {
      Count(endpoint, 200);
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      res.set_chunked_content_provider(
          "text/event-stream", [session, socket, include_usage](size_t, httplib::DataSink& sink) {
            HttpClient client(&sink, socket);
            const bool complete = session->Stream(client, include_usage);
            t_log_note = StrCat("stream prompt_tokens=", session->prompt_tokens(),
                                " completion_tokens=", session->completion_tokens(), complete ? "" : " client_gone");
            if (complete) sink.done();
            return complete;
          });
      return;
    }
    HttpClient client(nullptr, socket);
    auto body = session->Collect(client);
    t_log_note = StrCat("prompt_tokens=", session->prompt_tokens(), " completion_tokens=", session->completion_tokens(),
                        session->client_gone() ? " client_gone" : "");
    if (!body.ok()) {
      Count(endpoint, body.error().status);
      return ReplyError(res, body.error());
    }
    Count(endpoint, 200);
    Reply(res, 200, body.value());
  }

  void Chat(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/chat/completions";
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      Count(endpoint, error.status);
      t_log_note = error.message.substr(0, 200);
      ReplyError(res, error);
    };
    auto parsed = ParseChatRequest(req.body, options_.policy);
    if (!parsed.ok()) return fail(parsed.error());
    ChatRequest& chat = parsed.value();
    if (auto error = CheckModel(chat.model)) return fail(*error);
    if (chat_template_ == nullptr) {
      return fail(
          BadRequest("this model has no chat template (chat_template.jinja or tokenizer_config.json): use "
                     "/v1/completions"));
    }
    auto prompt = BuildChatPrompt(chat, *chat_template_, tokenizer_);
    if (!prompt.ok()) return fail(prompt.error());
    if (options_.log_prompts) LogInfo("prompt: ", prompt.value().text);
    if (auto error = CheckContext(prompt.value().tokens.size(), chat.fields, "messages")) return fail(*error);
    GenerationRequest request = BaseRequest(chat.fields);
    request.prompt = prompt.value().tokens;
    request.skip_special_tokens = false;  // <think>, <tool_call>... must reach the parsers
    auto grammar = ChatConstraint(chat, prompt.value());
    if (!grammar.ok()) return fail(grammar.error());
    request.grammar = std::move(grammar).value();
    request.logprobs = chat.logprobs ? chat.top_logprobs : -1;
    ResponseIdentity identity{RandomId("chatcmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]};
    auto formatter = MakeChatFormatter(std::move(identity), prompt.value(), chat.fields.n,
                                       {chat.logprobs, chat.top_logprobs}, tokenizer_);
    auto session = std::make_shared<GenerationSession>(backend_, registry_, &metrics_, std::move(formatter), arrival);
    std::vector<GenerationRequest> requests;
    requests.push_back(std::move(request));
    if (auto error = session->Submit(std::move(requests))) return fail(*error);
    Respond(req, res, endpoint, std::move(session), chat.fields.stream, chat.fields.include_usage);
  }

  // Structured output of a chat: response_format / structured_outputs / guided_*, or the tool calls' schemas
  // (tool_choice required or named, or strict functions with auto). Reasoning stays free when the prompt ends
  // inside <think>; the chat keeps special tokens in its text, so tags may come as special tokens.
  ApiOr<GrammarPtr> ChatConstraint(const ChatRequest& chat, const ChatPrompt& prompt) const {
    ConstraintContext context;
    context.reasoning_first = prompt.reasoning_start == ReasoningParser::Start::kReasoning;
    context.special_tokens_are_text = true;
    const bool tools_constrained =
        chat.tool_choice == ToolChoice::kRequired || chat.tool_choice == ToolChoice::kNamed ||
        (chat.tool_choice == ToolChoice::kAuto && !chat.strict_tools.empty());
    if (chat.fields.constraint) {
      if (tools_constrained) {
        return BadRequest(StrCat("'", chat.fields.constraint->param,
                                 "' cannot be combined with constrained tool calls (tool_choice required or named, "
                                 "or strict tools with auto)"),
                          chat.fields.constraint->param);
      }
      return CompileConstraint(*chat.fields.constraint, context);
    }
    return CompileToolConstraint(chat.tools, chat.tool_choice, chat.tool_choice_name, chat.strict_tools, context);
  }

  void Completion(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/completions";
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      Count(endpoint, error.status);
      t_log_note = error.message.substr(0, 200);
      ReplyError(res, error);
    };
    auto parsed = ParseCompletionRequest(req.body, options_.policy);
    if (!parsed.ok()) return fail(parsed.error());
    CompletionRequest& completion = parsed.value();
    if (auto error = CheckModel(completion.model)) return fail(*error);
    std::vector<GenerationRequest> requests;
    CompletionFormatOptions format;
    format.logprobs = completion.logprobs;
    GrammarPtr grammar;
    if (completion.fields.constraint) {  // raw text: special tokens are left out of it, so they are never allowed
      auto compiled = CompileConstraint(*completion.fields.constraint, ConstraintContext{});
      if (!compiled.ok()) return fail(compiled.error());
      grammar = std::move(compiled).value();
    }
    for (size_t i = 0; i < completion.prompts.size(); ++i) {
      const PromptInput& input = completion.prompts[i];
      GenerationRequest request = BaseRequest(completion.fields);
      if (input.is_tokens) {
        request.prompt = input.tokens;
      } else {
        auto tokens = tokenizer_.Encode(input.text, /*parse_special=*/true);
        if (!tokens.ok()) return fail(ApiError{500, "server_error", tokens.status().message(), "", ""});
        request.prompt = std::move(tokens).value();
      }
      const std::string param = completion.prompts.size() == 1 ? "prompt" : StrCat("prompt[", i, "]");
      if (request.prompt.empty()) return fail(BadRequest("the prompt is empty", param));
      if (auto error = CheckContext(request.prompt.size(), completion.fields, param.c_str())) return fail(*error);
      if (completion.echo) format.echo_texts.push_back(input.is_tokens ? tokenizer_.Decode(input.tokens) : input.text);
      request.logprobs = completion.logprobs ? *completion.logprobs : -1;
      request.grammar = grammar;
      if (options_.log_prompts) LogInfo("prompt: ", input.is_tokens ? tokenizer_.Decode(input.tokens) : input.text);
      requests.push_back(std::move(request));
    }
    ResponseIdentity identity{RandomId("cmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]};
    auto formatter = MakeCompletionFormatter(std::move(identity), static_cast<int>(requests.size()),
                                             completion.fields.n, format, tokenizer_);
    auto session = std::make_shared<GenerationSession>(backend_, registry_, &metrics_, std::move(formatter), arrival);
    if (auto error = session->Submit(std::move(requests))) return fail(*error);
    Respond(req, res, endpoint, std::move(session), completion.fields.stream, completion.fields.include_usage);
  }

  void Tokenize(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/tokenize";
    auto fail = [&](const ApiError& error) {
      Count(endpoint, error.status);
      ReplyError(res, error);
    };
    auto parsed = ParseTokenizeRequest(req.body, options_.policy);
    if (!parsed.ok()) return fail(parsed.error());
    const TokenizeRequest& request = parsed.value();
    if (auto error = CheckModel(request.model)) return fail(*error);
    std::vector<int32_t> tokens;
    if (request.prompt) {
      auto encoded = tokenizer_.Encode(*request.prompt, request.add_special_tokens);
      if (!encoded.ok()) return fail(ApiError{500, "server_error", encoded.status().message(), "", ""});
      tokens = std::move(encoded).value();
    } else {
      if (chat_template_ == nullptr) return fail(BadRequest("this model has no chat template", "messages"));
      auto prompt = BuildChatPrompt(request.chat, *chat_template_, tokenizer_);
      if (!prompt.ok()) return fail(prompt.error());
      tokens = prompt.value().tokens;
    }
    Json body = {{"count", tokens.size()}, {"max_model_len", backend_.max_model_len()}, {"tokens", tokens}};
    if (request.return_token_strs) {
      Json strings = Json::array();
      for (int32_t id : tokens) strings.push_back(SanitizeUtf8(tokenizer_.TokenText(id)));
      body["token_strs"] = std::move(strings);
    }
    Count(endpoint, 200);
    Reply(res, 200, body);
  }

  void Detokenize(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/detokenize";
    auto parsed = ParseDetokenizeRequest(req.body, options_.policy);
    if (!parsed.ok()) {
      Count(endpoint, parsed.error().status);
      return ReplyError(res, parsed.error());
    }
    if (auto error = CheckModel(parsed.value().model)) {
      Count(endpoint, error->status);
      return ReplyError(res, *error);
    }
    Count(endpoint, 200);
    Reply(res, 200, {{"prompt", SanitizeUtf8(tokenizer_.Decode(parsed.value().tokens))}});
  }

  ServerOptions options_;
  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_template_;
  GenerationBackend& backend_;
  InFlightRegistry registry_;
  ServerMetrics metrics_;
  httplib::Server server_;
  int listen_socket_ = -1;
  int port_ = -1;
  std::atomic<bool> shutting_down_{false};
  std::time_t start_time_ = std::time(nullptr);
};

HttpServer::HttpServer(ServerOptions options, const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                       GenerationBackend& backend)
    : impl_(std::make_unique<Impl>(std::move(options), tokenizer, chat_template, backend)) {}

HttpServer::~HttpServer() = default;
Status HttpServer::Bind() { return impl_->Bind(); }
int HttpServer::port() const { return impl_->port(); }
Status HttpServer::Run() { return impl_->Run(); }
void HttpServer::Shutdown() { impl_->Shutdown(); }
const ServerMetrics& HttpServer::metrics() const { return impl_->metrics(); }

}  // namespace glint::server
