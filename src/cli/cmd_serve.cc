// glint serve: the OpenAI-compatible HTTP server (docs/server.md) over the engine, on the embedded tiny model by
// default. Loads the model, its tokenizer and chat template, starts the engine thread, binds (loopback unless told
// otherwise) and serves until SIGTERM or SIGINT, which drain the server and exit 0.

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "base/file.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "cli/engine_flags.h"
#include "cli/model_flags.h"
#include "cli/offline_batch.h"
#include "cli/stop_signals.h"
#include "engine/engine.h"
#include "engine/prefix_disk.h"
#include "io/config.h"
#include "media/preprocess.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/http_transport.h"
#include "server/state_transfer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/image_tokens.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_encoder.h"

namespace glint::cli {
namespace {

struct ServeFlags {
  ModelFlag model;
  ForwardPathFlags path;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::vector<std::string> served_model_names;
  std::vector<std::string> allowed_origins;
  std::string chat_template;     // a file overriding the checkpoint's template
  server::ServerOptions limits;  // the transport's limits and deadlines, defaults from ServerOptions
  size_t max_body_bytes = size_t{16} << 20;
  int max_connections = 4096;
  int64_t max_queued = 512;
  bool allow_special_tokens_in_content = false;
  double shutdown_timeout = 30;
  bool no_request_log = false;
  bool log_prompts = false;
  bool no_webui = false;
  std::string allowed_local_media_path;
  EngineFlags engine;
  // Prefill/decode disaggregation (docs/disaggregation.md).
  std::string role = "both";
  int transfer_port = -1;            // −1: the HTTP port + 1
  std::string transfer_secret_file;  // "": the transfer plane does not authenticate
  std::string pd_fallback = "local";
  int64_t local_prefill_below = server::kDefaultLocalPrefillBelow;
  server::TransferTimeouts pd_timeouts;
};

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Image input (docs/server.md "Images"): the limits, the checkpoint's processor config, the local media root.
Status ConfigureImages(const ServeFlags& flags, const std::string& dir, const ModelConfig& config,
                       const Tokenizer& tokenizer, server::ServerOptions& options) {
  options.images.limits = flags.limits.images.limits;
  // The placeholder and markers from config.json, the tokenizer filling in; files that disagree are refused, a
  // checkpoint that names no placeholder serves text only.
  const ImageTokenIds& ids = config.image_tokens;
  auto tokens = ResolveImageTokens(ids.image, ids.start, ids.end, &tokenizer);
  if (tokens.ok()) {
    auto marker = ImageMarkerText(*tokens, tokenizer);
    if (marker.ok()) {
      options.images.image_token_id = tokens->image;
      options.images.marker_text = *marker;
    } else {
      options.images.no_placeholder_reason = marker.status().message();
    }
  } else if (tokens.status().code() == ErrorCode::kFailedPrecondition) {
    options.images.no_placeholder_reason = tokens.status().message();
  } else {
    return tokens.status();
  }
  options.policy.max_images = flags.limits.policy.max_images;
  std::string origin;
  GLINT_ASSIGN_OR_RETURN(options.images.processor, media::LoadProcessorConfig(dir, &origin));
  LogInfo("image processor: ", origin, " (", options.images.processor.min_image_tokens, " to ",
          options.images.processor.max_image_tokens, " tokens per image)");
  if (!flags.allowed_local_media_path.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(flags.allowed_local_media_path, error)) {
      return InvalidArgument("--allowed-local-media-path ", flags.allowed_local_media_path, " is not a directory");
    }
    options.images.allowed_local_media_path = flags.allowed_local_media_path;
  }
  return Status::Ok();
}

// The vision tower beside the text model (the same forward path), or null with `why_not` set: the model has none.
// Never fatal: text requests are served either way.
std::unique_ptr<ImageEncoder> LoadVisionTower(const std::string& dir, const LoadedModel& loaded,
                                              const ForwardPathFlags& path, std::string& why_not) {
  // Rank 0 only (the other ranks never get here): it runs the tower, and the batch plans carry the image rows.
  auto tower = LoadImageEncoder(dir, loaded.model->config(), path.path == "reference", loaded.pool.get());
  if (tower.ok()) {
    LogInfo("vision tower: ", (*tower)->description(), ": chat requests may carry images");
    return std::move(tower).value();
  }
  why_not = tower.status().message();
  LogInfo("no vision tower (", why_not, "): chat requests with images answer 400");
  return nullptr;
}

// --chat-template FILE, else the checkpoint's template; a checkpoint without one serves everything but chat.
Result<std::optional<ChatTemplate>> LoadChatTemplate(const std::string& override_file, const std::string& dir) {
  std::optional<ChatTemplate> chat_template;
  if (!override_file.empty()) {
    GLINT_ASSIGN_OR_RETURN(std::string source, ReadFile(override_file));
    GLINT_ASSIGN_OR_RETURN(ChatTemplate loaded, ChatTemplate::FromSource(source, override_file));
    chat_template.emplace(std::move(loaded));
  } else {
    auto loaded = ChatTemplate::Load(dir);
    if (loaded.ok()) {
      chat_template.emplace(std::move(loaded).value());
    } else if (loaded.status().code() == ErrorCode::kNotFound) {
      LogWarning(loaded.status().message(), ": /v1/chat/completions will answer 400");
    } else {
      return loaded.status();
    }
  }
  if (chat_template) LogInfo("chat template: ", chat_template->origin());
  return chat_template;
}

Result<server::ServerOptions> ServerOptionsFromFlags(const ServeFlags& flags, const std::string& dir,
                                                     const GenerationConfig& generation, const ModelConfig& config,
                                                     const Tokenizer& tokenizer, const ImageEncoder* images,
                                                     const std::string& no_images) {
  server::ServerOptions options = flags.limits;
  options.host = flags.host;
  options.port = flags.port;
  options.api_key = flags.api_key;
  options.model_names =
      flags.served_model_names.empty() ? std::vector<std::string>{BaseName(dir)} : flags.served_model_names;
  options.allowed_origins = flags.allowed_origins;
  options.max_body_bytes = flags.max_body_bytes;
  options.max_connections = flags.max_connections;
  options.max_queued_sequences = flags.max_queued;
  options.shutdown_grace_seconds = flags.shutdown_timeout;
  options.log_requests = !flags.no_request_log;
  options.log_prompts = flags.log_prompts;
  options.webui = !flags.no_webui;
  options.allow_special_tokens_in_content = flags.allow_special_tokens_in_content;
  if (options.batch_dir.empty()) options.batch_dir = server::DefaultBatchDirectory();
  GLINT_RETURN_IF_ERROR(ConfigureImages(flags, dir, config, tokenizer, options));
  options.images.engine_takes_images = images != nullptr;
  options.images.no_images_reason = no_images;
  // One descriptor per connection: 2,000 idle keep-alive clients must not hit the common soft limit of 1,024.
  const int64_t open_files = server::RaiseOpenFileLimit(options.max_connections);
  if (open_files < options.max_connections + 64) {
    LogWarning("the open-file limit is ", open_files, ", below --max-connections ", options.max_connections,
               ": connections beyond it will fail to be accepted (raise it with ulimit -n)");
  }
  options.policy.default_sampling.temperature = generation.do_sample ? generation.temperature : 0.0f;
  options.policy.default_sampling.top_p = generation.top_p;
  options.policy.default_sampling.top_k = generation.top_k;
  options.policy.vocab_size = config.vocab_size;
  return options;
}

// What `glint serve` and `glint batch` run on: the model, its tokenizer and template, the engine and the server's
// handlers (not bound to a port yet). Members in construction order; destroyed in reverse.
struct ServingStack {
  LoadedModel loaded;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<ImageEncoder> images;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::EngineBackend> backend;
  std::unique_ptr<server::TransferServer> transfer;  // --role prefill
  server::ServerOptions options;
  std::unique_ptr<server::HttpServer> server;
};

// --role: the backend (a decode server's fetches states), and a prefill server's transfer plane. The engine's
// layout and the model directory's fingerprint are what both sides compare before any byte of state moves.
Status StartRole(const ServeFlags& flags, const std::string& dir, ServingStack& stack) {
  if (flags.role == "both") {
    if (!flags.transfer_secret_file.empty()) {
      return InvalidArgument("--transfer-secret-file is for --role prefill and --role decode (a both server has no ",
                             "transfer plane)");
    }
    stack.backend = std::make_unique<server::EngineBackend>(*stack.engine);
    return Status::Ok();
  }
  // Under mpirun rank 0 exports and imports for every rank (docs/disaggregation.md "Several ranks").
  const Status whole_state = CheckStateOnRankZero(stack.loaded.model->shard_plan());
  if (!whole_state.ok()) {
    return Status(whole_state.code(), StrCat("--role ", flags.role, ": ", whole_state.message()));
  }
  GLINT_ASSIGN_OR_RETURN(uint64_t fingerprint, FingerprintModelDirectory(dir));
  const server::TransferLayout layout = server::LayoutOf(*stack.engine, fingerprint);
  std::shared_ptr<const server::TransferSecret> secret;
  if (!flags.transfer_secret_file.empty()) {
    GLINT_ASSIGN_OR_RETURN(server::TransferSecret loaded, server::TransferSecret::Load(flags.transfer_secret_file));
    secret = std::make_shared<const server::TransferSecret>(std::move(loaded));
    LogInfo("transfer plane: peers must prove the secret of ", flags.transfer_secret_file,
            " (authenticated, not encrypted)");
  } else {
    LogWarning("transfer plane: no --transfer-secret-file, so no authentication: whoever reaches it can ",
               flags.role == "prefill" ? "have prompts prefilled and read their states"
                                       : "send this server states to decode from");
  }
  if (flags.role == "decode") {
    server::DecodeRole decode{layout, flags.pd_timeouts, flags.local_prefill_below, flags.pd_fallback == "fail",
                              secret};
    stack.backend = std::make_unique<server::EngineBackend>(*stack.engine, decode);
    LogInfo(
        "role decode: states come from the prefill server a request's X-Glint-Prefill header names; prompts "
        "under ",
        flags.local_prefill_below, " tokens are prefilled here; a failed transfer ",
        decode.fail_without_prefill ? "fails the request" : "is prefilled here");
    return Status::Ok();
  }
  stack.backend = std::make_unique<server::EngineBackend>(*stack.engine);
  const int port = flags.transfer_port >= 0 ? flags.transfer_port : (flags.port == 0 ? 0 : flags.port + 1);
  if (port > 65535) return InvalidArgument("--transfer-port must be in [0, 65535], got ", port);
  GLINT_ASSIGN_OR_RETURN(stack.transfer,
                         server::TransferServer::Start(flags.host, port, *stack.engine, layout, flags.pd_timeouts,
                                                       stack.images ? &stack.images->config() : nullptr, secret));
  stack.backend->set_transfer_server(stack.transfer.get());
  LogInfo("role prefill: transfer plane on ", flags.host, ":", stack.transfer->port(), " (", layout.Describe(), ")");
  return Status::Ok();
}

Result<std::unique_ptr<ServingStack>> StartServingStack(ServeFlags& flags) {
  if (flags.port < 0 || flags.port > 65535) return InvalidArgument("--port must be in [0, 65535], got ", flags.port);
  if (flags.max_connections < 1) return InvalidArgument("--max-connections must be at least 1");
  if (flags.max_queued < 0) return InvalidArgument("--max-queued must be at least 0");
  auto stack = std::make_unique<ServingStack>();
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(stack->loaded, LoadModel({dir}, flags.path));
  const Model* model = stack->loaded.model.get();
  LogInfo("forward pass: ", stack->loaded.description);
  auto tokenizer = Tokenizer::Load(dir);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("glint serve needs the checkpoint's tokenizer.json");
  stack->tokenizer.emplace(std::move(tokenizer).value());
  GLINT_ASSIGN_OR_RETURN(stack->chat_template, LoadChatTemplate(flags.chat_template, dir));
  GLINT_ASSIGN_OR_RETURN(GenerationConfig generation, LoadGenerationConfig(dir, model->config()));

  BlockStopSignals();
  GLINT_ASSIGN_OR_RETURN(EngineOptions engine_options, ToEngineOptions(flags.engine));
  GLINT_RETURN_IF_ERROR(SetPrefixDiskModel(dir, engine_options));
  std::string no_images;
  stack->images = LoadVisionTower(dir, stack->loaded, flags.path, no_images);
  // The tower runs a whole image in one step: an image over the step's budget is refused from its header.
  if (stack->images != nullptr) flags.limits.images.max_tokens_per_image = engine_options.max_batch_tokens;
  GLINT_ASSIGN_OR_RETURN(stack->engine, Engine::Start(*model, engine_options, &*stack->tokenizer, stack->images.get()));
  LogInfo("engine capacity:\n", stack->engine->capacity().ToString());
  GLINT_RETURN_IF_ERROR(StartRole(flags, dir, *stack));
  GLINT_ASSIGN_OR_RETURN(stack->options, ServerOptionsFromFlags(flags, dir, generation, model->config(),
                                                                *stack->tokenizer, stack->images.get(), no_images));
  stack->options.role = flags.role;
  if (stack->transfer != nullptr) stack->options.transfer_port = stack->transfer->port();
  stack->server = std::make_unique<server::HttpServer>(
      stack->options, *stack->tokenizer, stack->chat_template ? &*stack->chat_template : nullptr, *stack->backend);
  return stack;
}

Status Serve(ServeFlags flags) {
  if (flags.api_key.empty()) {
    if (const char* key = std::getenv("GLINT_API_KEY"); key != nullptr) flags.api_key = key;
  }
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, StartServingStack(flags));
  server::HttpServer& server = *stack->server;
  const server::ServerOptions& options = stack->options;
  GLINT_RETURN_IF_ERROR(server.Bind());
  LogInfo("serving ", options.model_names[0], " on http://", flags.host, ":", server.port(),
          flags.api_key.empty() ? "" : " (API key required)");
  if (options.webui) LogInfo("chat page: open http://", flags.host, ":", server.port(), "/ in a browser");
  std::fflush(stderr);
  Status status;
  {
    StopSignalWatcher watcher([&server] { server.Shutdown(); });
    status = server.Run();
  }
  LogInfo("stopped");
  return status;
}

// glint batch: the same stack without a port; the input's lines run through the server's handlers. Under mpirun
// only rank 0 reads the input and writes the output (the files may exist on its host alone); the other ranks load
// their shards and follow rank 0's plans inside StartServingStack until it stops. A bad input fails rank 0 before
// the ranks join, and main then aborts them all with its message.
Status Batch(ServeFlags flags, OfflineBatchFlags batch) {
  batch.max_line_bytes = flags.max_body_bytes;  // a line is a request body
  std::optional<OfflineBatch> prepared;
  if (!Distributed() || World().rank() == 0) {
    GLINT_ASSIGN_OR_RETURN(prepared, PrepareOfflineBatch(batch));
  }
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, StartServingStack(flags));
  GLINT_CHECK(prepared.has_value()) << "only rank 0 gets past StartServingStack";
  // Twice what the engine runs by default: the waiting half holds no memory, and a sequence that finishes is
  // replaced at the next step from the engine's own queue, not after its thread has written the result and
  // submitted the next line (a step of an idle slot per request otherwise).
  const int64_t slots = std::max<int64_t>(1, stack->backend->max_running_sequences());
  const int64_t concurrency = batch.concurrency > 0 ? batch.concurrency : 2 * slots;
  LogInfo("glint batch: ", prepared->pending.size(), " requests to run, ", concurrency, " in flight (the engine runs ",
          slots, " at once", batch.concurrency > 0 ? "; --concurrency" : ", the rest wait in its queue", ")");
  return RunOfflineBatch(*stack->server, *stack->backend, std::move(*prepared), concurrency);
}

// The HTTP layer's per-connection limits (docs/server.md "Limits").
void AddConnectionLimitFlags(CLI::App& command, server::ServerOptions& limits) {
  command.add_option("--max-header-bytes", limits.max_header_bytes, "request line and headers together (431 beyond)")
      ->check(CLI::Range(size_t{256}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--header-timeout", limits.header_timeout_seconds,
                  "seconds from a request's first byte to the end of its headers (408 beyond)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  command
      .add_option("--body-timeout", limits.read_timeout_seconds,
                  "seconds from the end of the headers to the end of the body (408 beyond)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  command
      .add_option("--keep-alive-timeout", limits.keep_alive_seconds, "seconds an idle keep-alive connection stays open")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  command
      .add_option("--write-timeout", limits.write_timeout_seconds,
                  "seconds a write (or a full stream buffer) may make no progress before the connection closes")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  command
      .add_option("--stream-buffer-bytes", limits.stream_buffer_bytes,
                  "per stream: bytes of events the client has not taken yet; beyond, generation waits "
                  "(up to --write-timeout, then the stream is cancelled)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--handler-threads", limits.worker_threads,
                  "requests tokenized or waiting for generation at once; more wait in order")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
}

// Image input: where local files may come from and how large an image may be (docs/server.md "Images").
void AddImageFlags(CLI::App& command, ServeFlags& flags) {
  command.add_option("--allowed-local-media-path", flags.allowed_local_media_path,
                     "a directory whose files image parts may name as file:// URLs ('..' may not leave it, "
                     "symlinks are not followed); without it only data: URLs are accepted");
  command
      .add_option("--max-image-bytes", flags.limits.images.limits.max_bytes,
                  "largest encoded image (a data: URL's decoded bytes or a file)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--max-image-pixels", flags.limits.images.limits.max_pixels,
                  "largest decoded image, width x height, checked from the header before decoding")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  command
      .add_option("--max-image-pixels-per-request", flags.limits.images.max_request_pixels,
                  "the sum of width x height over one request's images, checked from the headers before decoding")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  command
      .add_option_function<int>(
          "--max-image-decodes",
          [&flags](int slots) { flags.limits.images.decode_gate = std::make_shared<server::DecodeGate>(slots); },
          "images decoded and preprocessed at once across the server; more requests wait (default 2)")
      ->check(CLI::Range(1, 1024));
  command
      .add_option("--max-images-per-request", flags.limits.policy.max_images, "image parts one conversation may carry")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
}

// The Responses API's stored responses (docs/server.md "Responses API"): kept in memory, oldest evicted first.
void AddResponsesStoreFlags(CLI::App& command, server::ServerOptions& limits) {
  command
      .add_option("--responses-store-max", limits.responses_store_max_responses,
                  "Responses API responses kept for previous_response_id and GET /v1/responses/{id} (0: none)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24))
      ->capture_default_str();
  command
      .add_option("--responses-store-bytes", limits.responses_store_max_bytes,
                  "bytes of JSON the stored Responses API responses and their conversations may take")
      ->check(CLI::Range(size_t{0}, size_t{1} << 40))
      ->capture_default_str();
}

// Batch jobs (docs/batch.md): where their files live and how much they may hold.
void AddBatchFlags(CLI::App& command, server::ServerOptions& limits) {
  command.add_option("--batch-dir", limits.batch_dir,
                     "directory of the Files and Batches APIs' files (created on first use, mode 0700; default "
                     "$XDG_DATA_HOME/glint/batches or ~/.local/share/glint/batches)");
  command.add_option("--batch-max-file-bytes", limits.batch_files.max_file_bytes, "largest file POST /v1/files takes")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 40))
      ->capture_default_str();
  command.add_option("--batch-max-files", limits.batch_files.max_files, "uploaded files kept at once")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  command
      .add_option("--batch-max-total-bytes", limits.batch_files.max_total_bytes,
                  "bytes the uploaded files may take together")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 50))
      ->capture_default_str();
  command
      .add_option("--batch-concurrency", limits.batches.concurrency,
                  "a batch's requests in flight at once (0: as many sequences as the engine runs at once, at most 64)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->capture_default_str();
}

// Prefill/decode disaggregation (docs/disaggregation.md).
void AddRoleFlags(CLI::App& command, ServeFlags& flags) {
  command
      .add_option("--role", flags.role,
                  "both: prefill and decode here (default); prefill: also serve prompt states to decode servers on "
                  "--transfer-port; decode: take a prompt's state from the prefill server a request's X-Glint-Prefill "
                  "header names. Under mpirun too (not with --dp-attention), any ranks and --tp on either side. With "
                  "--speculative mtp, start both the prefill and the decode servers with it (docs/disaggregation.md)")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  command.add_option("--transfer-port", flags.transfer_port,
                     "--role prefill: the TCP port of the transfer plane, on --host (default: --port + 1; 0: any)");
  command.add_option("--transfer-secret-file", flags.transfer_secret_file,
                     "--role prefill|decode: a file (mode 600, 16 to 4096 bytes) holding a secret shared by the "
                     "prefill and decode servers; each proves it to the other on every transfer (HMAC-SHA256), and "
                     "a peer without it is refused. Authenticates, does not encrypt (docs/disaggregation.md)");
  command
      .add_option("--pd-fallback", flags.pd_fallback,
                  "--role decode: when the prefill server is dead, stalled or refuses: local (prefill here, counted "
                  "in glint:pd_local_prefills_total) or fail (the request fails with 503)")
      ->check(CLI::IsMember({"local", "fail"}))
      ->capture_default_str();
  command
      .add_option("--local-prefill-below", flags.local_prefill_below,
                  "--role decode: prompts shorter than this many tokens are prefilled here (the router's "
                  "X-Glint-Local-Prefill-Below header overrides it per request)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  command
      .add_option("--pd-timeout", flags.pd_timeouts.io_seconds,
                  "seconds one frame of a state transfer may take before the peer counts as stalled")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      .add_option("--pd-prefill-timeout", flags.pd_timeouts.prefill_seconds,
                  "seconds a prefill server may compute one prompt for a decode server")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// The flags `glint serve` and `glint batch` share: the model, its template and names, request handling, the engine.
void AddStackFlags(CLI::App& command, ServeFlags& flags) {
  AddModelFlag(command, flags.model);
  AddForwardPathFlags(command, flags.path);
  command.add_option("--served-model-name", flags.served_model_names,
                     "model names the API accepts (a request's \"model\" must be one); the first is reported "
                     "(default: the model directory's name)");
  command.add_option("--chat-template", flags.chat_template,
                     "a Jinja file to use instead of the checkpoint's chat template");
  command.add_option("--max-body-bytes", flags.max_body_bytes, "largest request body (and batch input line)")
      ->capture_default_str();
  command.add_flag("--log-prompts", flags.log_prompts, "log prompt text (off by default: prompts are private)");
  command.add_flag("--allow-special-tokens-in-content", flags.allow_special_tokens_in_content,
                   "let special-token text in message content (\"<|user|>\", \"</think>\") become special "
                   "tokens; off by default, so a client cannot forge roles or tool calls");
  AddImageFlags(command, flags);
  AddEngineFlags(command, flags.engine);
}

GLINT_REGISTER_COMMAND(
    "serve", "serve the model over HTTP with the OpenAI API (docs/server.md)", 40,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<ServeFlags>();
      AddStackFlags(command, *flags);
      command.add_option("--host", flags->host, "address to bind (loopback by default)")->capture_default_str();
      command.add_option("--port", flags->port, "port to bind (0: any free port)")->capture_default_str();
      command.add_option("--api-key", flags->api_key,
                         "require 'Authorization: Bearer KEY' on every endpoint but /health "
                         "(default: $GLINT_API_KEY)");
      command
          .add_option("--allowed-origins", flags->allowed_origins,
                      "CORS origins to allow ('*' for any); none by default")
          ->delimiter(',');
      command
          .add_option("--max-connections", flags->max_connections,
                      "open connections (idle keep-alive ones included); one more is answered 503")
          ->check(CLI::Range(1, 1 << 20))
          ->capture_default_str();
      AddConnectionLimitFlags(command, flags->limits);
      command
          .add_option("--max-queued", flags->max_queued,
                      "sequences that may wait beyond what the engine runs (then 429)")
          ->capture_default_str();
      command
          .add_option("--shutdown-timeout", flags->shutdown_timeout,
                      "seconds in-flight requests get after SIGTERM before they are cancelled")
          ->capture_default_str();
      command
          .add_option("--health-stall-seconds", flags->limits.health_stall_seconds,
                      "/health answers 503 \"stalled\" when one engine step has run this long with requests queued")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      AddRoleFlags(command, *flags);
      command.add_flag("--no-request-log", flags->no_request_log, "do not log each request");
      command.add_flag("--no-webui", flags->no_webui, "do not serve the chat page at / (docs/webui.md)");
      AddResponsesStoreFlags(command, flags->limits);
      AddBatchFlags(command, flags->limits);
      return [flags] { return Serve(*flags); };
    });

// Offline, no request waits on a token's latency, so glint batch runs as many sequences as memory allows by
// default (a decode step reads the weights once for all of them; docs/batch.md "Throughput") where glint serve keeps
// 16 for its time per token.
constexpr int64_t kOfflineMaxSeqs = 64;

std::function<Status()> SetUpBatch(CLI::App& command) {
  auto flags = std::make_shared<ServeFlags>();
  auto batch = std::make_shared<OfflineBatchFlags>();
  AddStackFlags(command, *flags);
  AddOfflineBatchFlags(command, *batch);
  CLI::Option* max_seqs = command.get_option("--max-seqs");
  max_seqs->description(StrCat("most sequences in memory at once (state slots); default ", kOfflineMaxSeqs,
                               ", fewer when their states would take more than half of --memory"));
  max_seqs->default_str("");
  return [flags, batch, max_seqs] {
    flags->no_request_log = true;
    flags->no_webui = true;
    if (max_seqs->count() == 0) {
      flags->engine.max_seqs = kOfflineMaxSeqs;
      flags->engine.max_seqs_up_to_memory = true;
    }
    return Batch(*flags, *batch);
  };
}

GLINT_REGISTER_COMMAND("batch", "run a JSONL file of OpenAI batch requests offline, without HTTP (docs/batch.md)", 41,
                       SetUpBatch);

}  // namespace
}  // namespace glint::cli
