#include "server/http_server.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <ctime>
#include <thread>

#include "base/log.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/batch_routes.h"
#include "server/chat_prompt.h"
#include "server/generation_session.h"
#include "server/http_transport.h"
#include "server/json_reply.h"
#include "server/response_format.h"
#include "server/responses_request.h"
#include "server/responses_response.h"
#include "server/structured_output.h"
#include "server/webui.h"
#include "tokenizer/utf8.h"

namespace glint::server {
namespace {

using Clock = std::chrono::steady_clock;

// A whole decimal integer (a header's value).
bool ParseInt64(std::string_view text, int64_t& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

// Anthropic's Messages API (anthropic_request.h): its errors have Anthropic's shape, whatever produced them.
bool IsMessagesPath(std::string_view path) {
  return path.substr(0, std::string_view("/v1/messages").size()) == "/v1/messages";
}

// The error in the shape of the API the path belongs to.
void ReplyError(HttpResponse& res, const ApiError& error, std::string_view path = "") {
  res.status = error.status;
  if (error.status == 429 || error.status == 503) res.SetHeader("Retry-After", "1");
  res.SetContent(IsMessagesPath(path) ? AnthropicErrorBody(error) : ErrorBody(error), kJsonContentType);
}

void ServeWebAsset(const WebAsset& asset, HttpResponse& res) {
  for (const auto& [name, value] : WebAssetHeaders()) res.SetHeader(std::string(name), std::string(value));
  res.SetContent(std::string(asset.body), std::string(asset.content_type));
}

// The routes: their paths are the only endpoint labels /metrics knows (anything else is `other`).
struct RouteEntry {
  std::string_view path;
  std::string_view method;
  bool blocking;  // tokenizes or waits for generation: runs on a worker thread
};
constexpr RouteEntry kRoutes[] = {
    {"/health", "GET", false},
    {"/v1/models", "GET", false},
    {"/metrics", "GET", false},
    {"/v1/chat/completions", "POST", true},
    {"/v1/completions", "POST", true},
    {"/tokenize", "POST", true},
    {"/detokenize", "POST", true},
    {"/v1/messages", "POST", true},
    {"/v1/messages/count_tokens", "POST", true},
    {"/v1/responses", "POST", true},
};

// GET and DELETE /v1/responses/{id}: one label for every id.
constexpr std::string_view kStoredResponsePrefix = "/v1/responses/";
constexpr std::string_view kStoredResponseLabel = "/v1/responses/{id}";

const RouteEntry* FindRoute(std::string_view path) {
  for (const RouteEntry& route : kRoutes) {
    if (route.path == path) return &route;
  }
  return nullptr;
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

class HttpServer::Impl final : public HttpHandler {
 public:
  Impl(ServerOptions options, const Tokenizer& tokenizer, const ChatTemplate* chat_template, GenerationBackend& backend)
      : options_(std::move(options)),
        tokenizer_(tokenizer),
        chat_template_(chat_template),
        backend_(backend),
        registry_(backend.max_running_sequences() + options_.max_queued_sequences),
        responses_store_(options_.responses_store_max_responses, options_.responses_store_max_bytes),
        batch_storage_(options_.batch_dir),
        files_(batch_storage_, options_.batch_files),
        batches_(batch_storage_, files_, BatchOptionsFor(options_, backend),
                 [this](const std::string& url, std::string body, const std::function<bool()>& keep_going) {
                   return ExecuteBatchRequest(url, std::move(body), keep_going);
                 }),
        transport_(MakeTransportOptions(options_), *this, metrics_.transport()) {
    if (options_.model_names.empty()) options_.model_names = {"glint"};
    if (options_.policy.vocab_size == 0) options_.policy.vocab_size = tokenizer_.vocab_size();
  }

  Status Bind() { return transport_.Bind(); }
  int port() const { return transport_.port(); }
  Status Run() {
    batches_.Start();
    return transport_.Run();
  }

  void Shutdown() {
    if (shutting_down_.exchange(true)) return;
    batches_.Stop();  // its requests in flight are cancelled, not answered: a restart runs them again
    LogInfo("shutting down: no new requests; waiting up to ", options_.shutdown_grace_seconds,
            " s for in-flight requests");
    registry_.Drain();           // new generation requests get 503 from here on
    transport_.BeginShutdown();  // stop accepting; idle and slow connections close now
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options_.shutdown_grace_seconds * 1000));
    while ((registry_.requests() > 0 || transport_.busy() > 0) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::vector<GenerationId> left = registry_.Drain();
    if (!left.empty()) LogInfo("cancelling ", left.size(), " requests still running after the grace period");
    for (GenerationId id : left) backend_.Cancel(id);
    // Cancelled requests end at the engine's next step and their answers (503, or a stream's abort) go out; a
    // client that does not read them is not waited for beyond this.
    const auto flush_deadline = Clock::now() + kFlushTime;
    while (transport_.busy() > 0 && Clock::now() < flush_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    transport_.Stop();
  }

  const ServerMetrics& metrics() const { return metrics_; }

  // ---- HttpHandler ----

  bool RunsOnEventLoop(const HttpRequest& req) const override {
    if (IsBatchApiPath(req.path)) return false;  // reads and writes files
    const RouteEntry* route = FindRoute(req.path);
    return route == nullptr || !route->blocking || req.method != route->method;
  }

  size_t BodyLimit(const HttpRequest& head) const override {
    return IsFileUpload(head) ? UploadBodyLimit(options_) : 0;
  }

  void Handle(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) override {
    Route(req, res, connection);
    Count(req, res.status);
  }

  HttpResponse ErrorResponse(const HttpRequest& req, int status, std::string_view message,
                             std::string_view code) override {
    HttpResponse res;
    ReplyError(res,
               ApiError{status, status >= 500 ? "server_error" : "invalid_request_error", std::string(message), "",
                        std::string(code)},
               req.path);
    res.log_note = std::string(message.substr(0, 200));
    Count(req, status);
    return res;
  }

  void Finished(const HttpRequest& req, const HttpResponse& res, double seconds) override {
    if (!options_.log_requests) return;
    // Every field the client controls is escaped: no forged log lines, no raw control or invalid UTF-8 bytes.
    LogInfo(EscapeForLog(req.remote_address), ":", req.remote_port, " ",
            req.method.empty() ? "-" : EscapeForLog(req.method), " ", req.path.empty() ? "-" : EscapeForLog(req.path),
            " ", res.status, " ", static_cast<int64_t>(seconds * 1000), " ms", res.log_note.empty() ? "" : " ",
            EscapeForLog(res.log_note));
  }

 private:
  static constexpr std::chrono::seconds kFlushTime{5};

  // An upload's body: the file and the multipart framing around it.
  static size_t UploadBodyLimit(const ServerOptions& o) { return o.batch_files.max_file_bytes + (size_t{64} << 10); }

  static BatchOptions BatchOptionsFor(const ServerOptions& o, const GenerationBackend& backend) {
    BatchOptions batches = o.batches;
    if (batches.concurrency <= 0) batches.concurrency = std::clamp<int64_t>(backend.max_running_sequences(), 1, 64);
    batches.input.max_line_bytes = o.max_body_bytes;  // a line is one request: no larger than a request body
    return batches;
  }

  static TransportOptions MakeTransportOptions(const ServerOptions& o) {
    TransportOptions t;
    t.host = o.host;
    t.port = o.port;
    t.max_connections = std::max(1, o.max_connections);
    t.max_header_bytes = o.max_header_bytes;
    t.max_body_bytes = o.max_body_bytes;
    t.max_any_body_bytes = std::max(o.max_body_bytes, UploadBodyLimit(o));
    t.idle_timeout_seconds = o.keep_alive_seconds;
    t.header_timeout_seconds = o.header_timeout_seconds;
    t.body_timeout_seconds = o.read_timeout_seconds;
    t.write_timeout_seconds = o.write_timeout_seconds;
    t.stream_buffer_bytes = o.stream_buffer_bytes;
    t.worker_threads = o.worker_threads;
    return t;
  }

  // The endpoint label of a request in /metrics: a route, a chat-page file, OPTIONS, or `other` (a label per
  // unknown path would let any client grow /metrics without bound).
  std::string MetricLabel(const HttpRequest& req) const {
    if (const RouteEntry* route = FindRoute(req.path)) return std::string(route->path);
    if (req.path.starts_with(kStoredResponsePrefix)) return std::string(kStoredResponseLabel);
    if (IsBatchApiPath(req.path)) return BatchApiMetricLabel(req.path);
    if (req.method == "OPTIONS") return "OPTIONS";
    if (const WebAsset* asset = options_.webui ? FindWebAsset(req.path) : nullptr) return std::string(asset->path);
    return "other";
  }

  void Count(const HttpRequest& req, int status) { metrics_.CountHttpRequest(MetricLabel(req), status); }

  void Route(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) {
    // The chat page (webui.h) needs no API key: it is the same for everyone and asks for the key itself.
    const bool read = req.method == "GET" || req.method == "HEAD";
    if (const WebAsset* asset = options_.webui && read ? FindWebAsset(req.path) : nullptr) {
      return ServeWebAsset(*asset, res);
    }
    AddCors(req, res);
    if (req.method == "OPTIONS") return Preflight(req, res);
    // Clients probe the base URL before they start (Claude Code sends HEAD /): it answers without a key.
    if (req.method == "HEAD" && req.path == "/") return;
    if (req.path != "/health" && !options_.api_key.empty() && !Authorized(req, res)) return;
    const RouteEntry* route = FindRoute(req.path);
    if (route == nullptr && req.path.starts_with(kStoredResponsePrefix)) return StoredResponseById(req, res);
    if (route == nullptr && IsBatchApiPath(req.path)) return HandleBatchApi(req, res, files_, batches_);
    if (route == nullptr) {
      return ReplyError(res,
                        ApiError{404, "invalid_request_error", StrCat("no such endpoint: ", req.method, " ", req.path),
                                 "", "not_found"},
                        req.path);
    }
    if (req.method != route->method && !(route->method == "GET" && req.method == "HEAD")) {
      return MethodNotAllowed(req, res, std::string(route->method).c_str());
    }
    if (req.path == "/health") return Health(res);
    if (req.path == "/v1/models") return Models(res);
    if (req.path == "/metrics") {
      return res.SetContent(metrics_.Render(backend_.Metrics(), options_.model_names[0]),
                            "text/plain; version=0.0.4; charset=utf-8");
    }
    if (req.path == "/v1/chat/completions") return Chat(req, res, connection);
    if (req.path == "/v1/completions") return Completion(req, res, connection);
    if (req.path == "/tokenize") return Tokenize(req, res);
    if (req.path == "/v1/messages") return Messages(req, res, connection);
    if (req.path == "/v1/messages/count_tokens") return CountMessageTokens(req, res);
    if (req.path == "/v1/responses") return Responses(req, res, connection);
    Detokenize(req, res);
  }

  // 200 {"status": "ok"}, or 503 with a status and the reason: shutting down, a damaged weights file (for good),
  // or an engine whose current step has run past --health-stall-seconds with requests queued (docs/server.md).
  void Health(HttpResponse& res) {
    if (shutting_down_) return ReplyError(res, ApiError{503, "server_error", "shutting down", "", ""});
    const BackendHealth health = backend_.Health();
    auto unhealthy = [&](const char* status, const std::string& reason) {
      ReplyJson(res, 503, {{"status", status}, {"reason", reason}});
    };
    if (!health.damage.ok()) return unhealthy("damaged", health.damage.message());
    if (health.requests_queued > 0 && health.seconds_in_step > options_.health_stall_seconds) {
      return unhealthy("stalled",
                       StrCat("the engine has made no progress for ", static_cast<int64_t>(health.seconds_in_step),
                              " s (one step running; --health-stall-seconds ", options_.health_stall_seconds, ") with ",
                              health.requests_queued, " requests running or waiting"));
    }
    Json body = {{"status", "ok"}, {"role", options_.role}};
    if (options_.role == "prefill") body["transfer_port"] = options_.transfer_port;
    ReplyJson(res, 200, body);
  }

  // The router's headers on a decode server (docs/disaggregation.md): which prefill server computes the prompt,
  // and below which length this server computes it itself. Malformed values are the client's error (400).
  std::optional<ApiError> ApplyPrefillHeaders(const HttpRequest& req, GenerationRequest& request) const {
    if (options_.role != "decode") return std::nullopt;
    const std::string_view from = req.Header("X-Glint-Prefill");
    if (!from.empty()) {
      const size_t colon = from.rfind(':');
      int64_t port = 0;
      const bool valid = colon != std::string_view::npos && colon > 0 && colon + 1 < from.size() &&
                         ParseInt64(from.substr(colon + 1), port) && port > 0 && port < 65536;
      if (!valid) {
        return BadRequest(StrCat("the X-Glint-Prefill header is '", from.substr(0, 100),
                                 "'; expected host:port (a prefill server's transfer address)"));
      }
      request.prefill_from = std::string(from);
    }
    const std::string_view below = req.Header("X-Glint-Local-Prefill-Below");
    if (!below.empty() && (!ParseInt64(below, request.local_prefill_below) || request.local_prefill_below < 0)) {
      return BadRequest(
          StrCat("the X-Glint-Local-Prefill-Below header is '", below.substr(0, 100), "'; expected a token count ≥ 0"));
    }
    return std::nullopt;
  }

  // `Authorization: Bearer KEY`, or Anthropic clients' `x-api-key: KEY`.
  bool Authorized(const HttpRequest& req, HttpResponse& res) {
    const std::string_view authorization = req.Header("Authorization");
    const std::string_view api_key_header = req.Header("x-api-key");
    constexpr std::string_view kBearer = "Bearer ";
    const bool bearer = authorization.size() > kBearer.size() && authorization.substr(0, kBearer.size()) == kBearer;
    if (bearer && ConstantTimeEquals(authorization.substr(kBearer.size()), options_.api_key)) return true;
    if (!api_key_header.empty() && ConstantTimeEquals(api_key_header, options_.api_key)) return true;
    res.SetHeader("WWW-Authenticate", "Bearer");
    const bool given = bearer || !api_key_header.empty();
    ReplyError(
        res,
        ApiError{401, "authentication_error",
                 given ? "invalid API key" : "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key'", "",
                 "invalid_api_key"},
        req.path);
    return false;
  }

  bool OriginAllowed(std::string_view origin) const {
    for (const std::string& allowed : options_.allowed_origins) {
      if (allowed == "*" || allowed == origin) return true;
    }
    return false;
  }

  void AddCors(const HttpRequest& req, HttpResponse& res) const {
    if (options_.allowed_origins.empty()) return;
    const std::string_view origin = req.Header("Origin");
    if (origin.empty() || !OriginAllowed(origin)) return;
    res.SetHeader("Access-Control-Allow-Origin", std::string(origin));
    res.SetHeader("Vary", "Origin");
  }

  void Preflight(const HttpRequest& req, HttpResponse& res) {
    if (options_.allowed_origins.empty() || !OriginAllowed(req.Header("Origin"))) {
      return ReplyError(res, ApiError{405, "invalid_request_error", "CORS is not enabled for this origin", "", ""});
    }
    res.status = 204;
    res.SetHeader("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.SetHeader("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.SetHeader("Access-Control-Max-Age", "600");
  }

  void MethodNotAllowed(const HttpRequest& req, HttpResponse& res, const char* allowed) {
    res.SetHeader("Allow", allowed);
    ReplyError(res,
               ApiError{405, "invalid_request_error", StrCat(req.method, " ", req.path, ": use ", allowed), "",
                        "method_not_allowed"},
               req.path);
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

  void Models(HttpResponse& res) {
    Json data = Json::array();
    for (const std::string& name : options_.model_names) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(start_time_)},
                      {"owned_by", "glint"},
                      {"root", options_.model_names[0]},
                      {"max_model_len", backend_.max_model_len()}});
    }
    ReplyJson(res, 200, {{"object", "list"}, {"data", std::move(data)}});
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

  // Runs a session: streaming (the transport sends each event as a chunk), or collecting into one JSON body.
  void Respond(HttpResponse& res, ClientConnection& connection, const std::shared_ptr<GenerationSession>& session,
               bool stream, bool include_usage, std::string_view path = "") {
    if (stream) {
      res.status = 200;
      res.content_type = "text/event-stream";
      res.SetHeader("Cache-Control", "no-cache");
      res.SetHeader("X-Accel-Buffering", "no");
      res.stream = [session, include_usage](ClientConnection& client, std::string& log_note) {
        const bool complete = session->Stream(client, include_usage);
        log_note = StrCat("stream prompt_tokens=", session->prompt_tokens(),
                          " completion_tokens=", session->completion_tokens(), complete ? "" : " client_gone");
      };
      return;
    }
    auto body = session->Collect(connection);
    res.log_note =
        StrCat("prompt_tokens=", session->prompt_tokens(), " completion_tokens=", session->completion_tokens(),
               session->client_gone() ? " client_gone" : "");
    if (!body.ok()) return ReplyError(res, body.error(), path);
    ReplyJson(res, 200, body.value());
  }

  ChatPromptOptions PromptOptions() const {
    return {options_.allow_special_tokens_in_content, backend_.max_model_len(), options_.images.marker_text};
  }

  // Image parts: loaded, decoded and preprocessed, their placeholders in `tokens` expanded to N image tokens each.
  // Empty when the request has none.
  ApiOr<std::vector<LoadedImage>> PrepareImages(const ChatRequest& chat, std::vector<int32_t>& tokens,
                                                std::vector<size_t>* starts = nullptr) const {
    if (chat.images.empty()) return std::vector<LoadedImage>{};
    if (options_.images.image_token_id < 0) {
      return BadRequest(options_.images.no_placeholder_reason + ", so it cannot take images", chat.images[0].param);
    }
    API_ASSIGN_OR_RETURN(std::vector<LoadedImage> images, LoadImages(chat.images, options_.images));
    API_ASSIGN_OR_RETURN(tokens, ExpandImageTokens(tokens, options_.images.image_token_id, images, starts));
    return images;
  }

  // A chat request, from chat completions or translated from another API (Anthropic's Messages, the Responses
  // API), made ready to submit: its prompt (template, tokens, images expanded) and the engine request with its
  // constraint.
  struct PreparedChat {
    ChatPrompt prompt;
    GenerationRequest request;
  };
  // `conversation_param` names the conversation in context errors ("messages", "input"). `clamp_max_tokens`: a
  // max_tokens beyond the context room is lowered to it instead of refused (the Messages API reports the context
  // filling up as its own stop_reason).
  ApiOr<PreparedChat> PrepareChat(ChatRequest& chat, const char* conversation_param,
                                  bool clamp_max_tokens = false) const {
    if (auto error = CheckModel(chat.model)) return *error;
    if (chat_template_ == nullptr) {
      return BadRequest(
          "this model has no chat template (chat_template.jinja or tokenizer_config.json): use "
          "/v1/completions");
    }
    PreparedChat prepared;
    API_ASSIGN_OR_RETURN(prepared.prompt, BuildChatPrompt(chat, *chat_template_, tokenizer_, PromptOptions()));
    std::vector<size_t> starts;
    API_ASSIGN_OR_RETURN(std::vector<LoadedImage> images, PrepareImages(chat, prepared.prompt.tokens, &starts));
    if (!images.empty() && !options_.images.engine_takes_images) {
      int64_t image_tokens = 0;
      for (const LoadedImage& image : images) image_tokens += image.image.num_tokens();
      return BadRequest(StrCat("this server takes no images: ", options_.images.no_images_reason, " (the ",
                               images.size(), " image(s) were decoded and preprocessed, ", image_tokens,
                               " image tokens; /tokenize shows the expanded prompt)"),
                        images[0].param, "image_input_not_supported");
    }
    if (options_.log_prompts) LogInfo("prompt: ", prepared.prompt.text);
    const int64_t room = backend_.max_model_len() - static_cast<int64_t>(prepared.prompt.tokens.size());
    if (clamp_max_tokens && chat.fields.max_tokens && room > 0) {
      chat.fields.max_tokens = std::min(*chat.fields.max_tokens, room);
    }
    if (auto error = CheckContext(prepared.prompt.tokens.size(), chat.fields, conversation_param)) return *error;
    prepared.request = BaseRequest(chat.fields);
    prepared.request.prompt = prepared.prompt.tokens;
    prepared.request.images = ToGenerationImages(std::move(images), starts);
    prepared.request.skip_special_tokens = false;  // <think>, <tool_call>... must reach the parsers
    API_ASSIGN_OR_RETURN(prepared.request.grammar, ChatConstraint(chat, prepared.prompt));
    return prepared;
  }

  // Submits one prepared request under `formatter` and answers (streamed or whole).
  void Run(const HttpRequest& req, HttpResponse& res, ClientConnection& connection, PreparedChat prepared,
           std::unique_ptr<ResponseFormatter> formatter, Clock::time_point arrival, const SamplingFields& fields) {
    const std::string_view path = req.path;
    prepared.request.batch = req.batch_job;
    if (auto error = ApplyPrefillHeaders(req, prepared.request)) return ReplyError(res, *error, path);
    auto session = std::make_shared<GenerationSession>(backend_, registry_, &metrics_, std::move(formatter), arrival);
    session->set_keep_alive_interval(options_.stream_keep_alive);
    std::vector<GenerationRequest> requests;
    requests.push_back(std::move(prepared.request));
    if (auto error = session->Submit(std::move(requests))) {
      // Anthropic clients read a full server as overloaded_error (503) and retry; rate_limit_error means a quota.
      if (IsMessagesPath(path) && error->code == "server_busy") error->status = 503;
      res.log_note = error->message.substr(0, 200);
      return ReplyError(res, *error, path);
    }
    Respond(res, connection, session, fields.stream, fields.include_usage, path);
  }

  void Chat(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) {
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      res.log_note = error.message.substr(0, 200);
      ReplyError(res, error);
    };
    auto parsed = ParseChatRequest(req.body, options_.policy);
    if (!parsed.ok()) return fail(parsed.error());
    ChatRequest& chat = parsed.value();
    auto prepared = PrepareChat(chat, "messages");
    if (!prepared.ok()) return fail(prepared.error());
    prepared.value().request.logprobs = chat.logprobs ? chat.top_logprobs : -1;
    ResponseIdentity identity{RandomId("chatcmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]};
    auto formatter = MakeChatFormatter(std::move(identity), prepared.value().prompt, chat.fields.n,
                                       {chat.logprobs, chat.top_logprobs}, tokenizer_);
    Run(req, res, connection, std::move(prepared).value(), std::move(formatter), arrival, chat.fields);
  }

  // POST /v1/messages: Anthropic's Messages API, translated into the chat request (anthropic_request.h) and
  // answered in its shape (anthropic_response.h).
  void Messages(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) {
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      res.log_note = error.message.substr(0, 200);
      ReplyError(res, error, req.path);
    };
    auto parsed = ParseMessagesRequest(req.body, options_.policy, /*count_tokens=*/false);
    if (!parsed.ok()) return fail(parsed.error());
    MessagesRequest& messages = parsed.value();
    for (const std::string& tool : messages.skipped) {
      LogInfo("/v1/messages: server tool ", EscapeForLog(tool), " left out: glint cannot run it");
    }
    auto prepared = PrepareChat(messages.chat, "messages", /*clamp_max_tokens=*/true);
    if (!prepared.ok()) return fail(prepared.error());
    MessagesFormatOptions format;
    format.max_tokens = messages.max_tokens;
    format.thinking = messages.thinking;
    ResponseIdentity identity{RandomId("msg_"), static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]};
    auto formatter = MakeMessagesFormatter(std::move(identity), prepared.value().prompt, format);
    Run(req, res, connection, std::move(prepared).value(), std::move(formatter), arrival, messages.chat.fields);
  }

  // POST /v1/messages/count_tokens: the prompt a create would submit, counted the same way (images expanded), so
  // the figure equals that create's input_tokens + cache_read_input_tokens.
  void CountMessageTokens(const HttpRequest& req, HttpResponse& res) {
    auto fail = [&](const ApiError& error) { ReplyError(res, error, req.path); };
    auto parsed = ParseMessagesRequest(req.body, options_.policy, /*count_tokens=*/true);
    if (!parsed.ok()) return fail(parsed.error());
    ChatRequest& chat = parsed.value().chat;
    if (auto error = CheckModel(chat.model)) return fail(*error);
    if (chat_template_ == nullptr) return fail(BadRequest("this model has no chat template", "messages"));
    auto prompt = BuildChatPrompt(chat, *chat_template_, tokenizer_, PromptOptions());
    if (!prompt.ok()) return fail(prompt.error());
    std::vector<int32_t> tokens = std::move(prompt.value().tokens);
    auto images = PrepareImages(chat, tokens);
    if (!images.ok()) return fail(images.error());
    ReplyJson(res, 200, {{"input_tokens", tokens.size()}});
  }

  // POST /v1/responses (responses_request.h, responses_response.h): translated into a chat request; the finished
  // response is stored (when `store`) with its conversation, for previous_response_id and GET.
  void Responses(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) {
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      res.log_note = error.message.substr(0, 200);
      ReplyError(res, error);
    };
    auto parsed = ParseResponsesRequest(req.body, options_.policy);
    if (!parsed.ok()) return fail(parsed.error());
    ResponsesRequest& request = parsed.value();
    std::shared_ptr<const StoredResponse> previous;
    if (request.previous_response_id) {
      previous = responses_store_.Get(*request.previous_response_id);
      if (previous == nullptr) {
        return fail(ApiError{404, "invalid_request_error",
                             StrCat("previous response '", request.previous_response_id->substr(0, 128),
                                    "' not found: it was not stored (store: false), was deleted or evicted, or "
                                    "the server restarted"),
                             "previous_response_id", "previous_response_not_found"});
      }
    }
    auto chat = TranslateResponsesRequest(request, previous ? &previous->items : nullptr, options_.policy);
    if (!chat.ok()) return fail(chat.error());
    LogSkippedResponsesParts(request);
    auto prepared = PrepareChat(chat.value(), "input");
    if (!prepared.ok()) return fail(prepared.error());
    if (!request.parallel_tool_calls && chat.value().tool_choice != ToolChoice::kNone) {
      // One call at most: generation ends where the first call does (the formatter drops any later call too).
      prepared.value().request.stop_strings.push_back("</tool_call>");
    }
    const std::string id = RandomId("resp_");
    Json skeleton =
        ResponseSkeleton(request, chat.value(), id, static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]);
    ResponsesOutputOptions output{request.custom_tools,   request.parallel_tool_calls,
                                  request.max_tool_calls, request.output_logprobs,
                                  request.top_logprobs,   request.include_encrypted_reasoning};
    auto formatter = MakeResponsesFormatter(std::move(skeleton), prepared.value().prompt, std::move(output), tokenizer_,
                                            StoreResponse(request, previous));
    Run(req, res, connection, std::move(prepared).value(), std::move(formatter), arrival, chat.value().fields);
  }

  // What keeps a finished response: its object, and the conversation a follow-up continues (the previous
  // response's items, this input, this output). Nothing when the request asked for store: false.
  ResponseFinished StoreResponse(const ResponsesRequest& request, std::shared_ptr<const StoredResponse> previous) {
    if (!request.store) return nullptr;
    return [this, previous = std::move(previous), input = request.input_items](const Json& response) {
      Json items = previous ? previous->items : Json::array();
      for (const Json& item : input) items.push_back(item);
      for (const Json& item : response["output"]) items.push_back(item);
      if (!responses_store_.Put(response["id"].get<std::string>(), response, std::move(items))) {
        LogInfo("responses: ", response["id"].get<std::string>(), " is larger than --responses-store-bytes (",
                options_.responses_store_max_bytes, ") and is not stored");
      }
    };
  }

  static void LogSkippedResponsesParts(const ResponsesRequest& request) {
    if (!request.skipped_tools.empty()) {
      LogInfo("responses: skipped tools of types glint cannot run: ", EscapeForLog(Join(request.skipped_tools)));
    }
    if (!request.skipped_items.empty()) {
      LogInfo("responses: skipped input items of types glint cannot act on: ",
              EscapeForLog(Join(request.skipped_items)));
    }
  }

  static std::string Join(const std::vector<std::string>& names) {
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
    return joined;
  }

  // GET (or HEAD) and DELETE /v1/responses/{id}.
  void StoredResponseById(const HttpRequest& req, HttpResponse& res) {
    const std::string id = req.path.substr(kStoredResponsePrefix.size());
    const bool read = req.method == "GET" || req.method == "HEAD";
    if (!read && req.method != "DELETE") return MethodNotAllowed(req, res, "GET, DELETE");
    const auto not_found = [&] {
      ReplyError(res, ApiError{404, "invalid_request_error",
                               StrCat("response '", id.substr(0, 128),
                                      "' not found: it was not stored (store: false), was deleted or evicted, or "
                                      "the server restarted"),
                               "response_id", "not_found"});
    };
    if (read) {
      auto stored = responses_store_.Get(id);
      if (stored == nullptr) return not_found();
      return ReplyJson(res, 200, stored->response);
    }
    if (!responses_store_.Erase(id)) return not_found();
    ReplyJson(res, 200, {{"id", id}, {"object", "response"}, {"deleted", true}});
  }

  // Structured output of a chat: response_format / structured_outputs / guided_*, or the tool calls' schemas
  // (tool_choice required or named, or strict functions with auto). Reasoning stays free when the prompt ends
  // inside <think>; the chat keeps special tokens in its text, so tags may come as special tokens.
  ApiOr<GrammarPtr> ChatConstraint(const ChatRequest& chat, const ChatPrompt& prompt) const {
    ConstraintContext context;
    context.reasoning_first = prompt.reasoning_start == ReasoningParser::Start::kReasoning;
    context.special_tokens_are_text = true;
    const bool tools_constrained = chat.tool_choice == ToolChoice::kRequired ||
                                   chat.tool_choice == ToolChoice::kNamed ||
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

  void Completion(const HttpRequest& req, HttpResponse& res, ClientConnection& connection) {
    const auto arrival = Clock::now();
    auto fail = [&](const ApiError& error) {
      res.log_note = error.message.substr(0, 200);
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
        // Every token is at most max_token_bytes long, so a text that must exceed the context is refused before
        // the tokenizer spends its time on it (a 15 MiB prompt costs seconds of CPU).
        const int64_t fewest_tokens = static_cast<int64_t>(input.text.size() / tokenizer_.max_token_bytes());
        if (fewest_tokens >= backend_.max_model_len()) {
          return fail(BadRequest(
              StrCat("the prompt has at least ", fewest_tokens, " tokens (", input.text.size(),
                     " bytes) but this model's context is ", backend_.max_model_len(), " tokens (prompt + output)"),
              completion.prompts.size() == 1 ? "prompt" : StrCat("prompt[", i, "]"), "context_length_exceeded"));
        }
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
      request.batch = req.batch_job;
      if (auto error = ApplyPrefillHeaders(req, request)) return fail(*error);
      if (options_.log_prompts) LogInfo("prompt: ", input.is_tokens ? tokenizer_.Decode(input.tokens) : input.text);
      requests.push_back(std::move(request));
    }
    ResponseIdentity identity{RandomId("cmpl-"), static_cast<int64_t>(std::time(nullptr)), options_.model_names[0]};
    auto formatter = MakeCompletionFormatter(std::move(identity), static_cast<int>(requests.size()),
                                             completion.fields.n, format, tokenizer_);
    auto session = std::make_shared<GenerationSession>(backend_, registry_, &metrics_, std::move(formatter), arrival);
    if (auto error = session->Submit(std::move(requests))) return fail(*error);
    Respond(res, connection, session, completion.fields.stream, completion.fields.include_usage);
  }

  // A client that is there while `keep_going` says so: a batch's request, cancelled (as a client that left) when
  // its batch is cancelled or the server stops.
  class BatchClient final : public ClientConnection {
   public:
    explicit BatchClient(const std::function<bool()>& keep_going) : keep_going_(keep_going) {}
    bool Write(std::string_view) override { return keep_going_(); }
    bool Alive() override { return keep_going_(); }

   private:
    const std::function<bool()>& keep_going_;
  };

 public:
  BatchResponse ExecuteBatchRequest(const std::string& url, std::string body, const std::function<bool()>& keep_going) {
    HttpRequest req;
    req.method = "POST";
    req.target = req.path = url;
    req.body = std::move(body);
    req.remote_address = "batch";
    req.batch_job = true;
    HttpResponse res;
    BatchClient client(keep_going);
    if (url == "/v1/chat/completions") {
      Chat(req, res, client);
    } else if (url == "/v1/completions") {
      Completion(req, res, client);
    } else if (url == "/v1/messages") {
      Messages(req, res, client);
    } else if (url == "/v1/responses") {
      Responses(req, res, client);
    } else {
      return {404, Json::parse(ErrorBody(BadRequest(StrCat("no batch endpoint ", url), "url")))};
    }
    auto parsed = ParseJsonObject(res.body, 256);
    return {res.status, parsed.ok() ? std::move(parsed).value() : Json(res.body)};
  }

 private:
  void Tokenize(const HttpRequest& req, HttpResponse& res) {
    auto fail = [&](const ApiError& error) { ReplyError(res, error); };
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
      auto prompt = BuildChatPrompt(request.chat, *chat_template_, tokenizer_, PromptOptions());
      if (!prompt.ok()) return fail(prompt.error());
      tokens = prompt.value().tokens;
      auto images = PrepareImages(request.chat, tokens);
      if (!images.ok()) return fail(images.error());
    }
    Json body = {{"count", tokens.size()}, {"max_model_len", backend_.max_model_len()}, {"tokens", tokens}};
    if (request.return_token_strs) {
      Json strings = Json::array();
      for (int32_t id : tokens) strings.push_back(SanitizeUtf8(tokenizer_.TokenText(id)));
      body["token_strs"] = std::move(strings);
    }
    ReplyJson(res, 200, body);
  }

  void Detokenize(const HttpRequest& req, HttpResponse& res) {
    auto parsed = ParseDetokenizeRequest(req.body, options_.policy);
    if (!parsed.ok()) return ReplyError(res, parsed.error());
    if (auto error = CheckModel(parsed.value().model)) return ReplyError(res, *error);
    ReplyJson(res, 200, {{"prompt", SanitizeUtf8(tokenizer_.Decode(parsed.value().tokens))}});
  }

  ServerOptions options_;
  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_template_;
  GenerationBackend& backend_;
  InFlightRegistry registry_;
  ResponsesStore responses_store_;
  ServerMetrics metrics_;
  std::atomic<bool> shutting_down_{false};
  std::time_t start_time_ = std::time(nullptr);
  BatchStorage batch_storage_;
  FileStore files_;
  BatchManager batches_;  // after what its requests use: its runner stops before those go
  // Last: destroyed first, so no handler thread outlives what it uses.
  HttpTransport transport_;
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
BatchResponse HttpServer::ExecuteBatchRequest(const std::string& url, std::string body,
                                              const std::function<bool()>& keep_going) {
  return impl_->ExecuteBatchRequest(url, std::move(body), keep_going);
}

}  // namespace glint::server
