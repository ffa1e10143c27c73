// The Files and Batches APIs' routes (docs/batch.md): /v1/files[/{id}[/content]] and
// /v1/batches[/{id}[/cancel]]. http_server.cc sends every request under those prefixes here after its access
// checks; these handlers only translate HTTP to the stores (batch_files.h, batch_jobs.h) and back.
#pragma once

#include <string>
#include <string_view>

#include "server/batch_files.h"
#include "server/batch_jobs.h"
#include "server/http_message.h"

namespace glint::server {

// A path under /v1/files or /v1/batches.
bool IsBatchApiPath(std::string_view path);
// The /metrics label of such a path ("/v1/files/{id}/content"...): one per route, whatever the ids.
std::string BatchApiMetricLabel(std::string_view path);
// Whether the request is an upload (POST /v1/files), whose body may be as large as the file limit allows.
bool IsFileUpload(const HttpRequest& head);

void HandleBatchApi(const HttpRequest& req, HttpResponse& res, FileStore& files, BatchManager& batches);

}  // namespace glint::server
