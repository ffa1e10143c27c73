#include "engine/request.h"

namespace glint {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

void OutputQueue::OnOutput(RequestOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outputs_.push_back(std::move(output));
  }
  ready_.notify_one();
}

std::optional<RequestOutput> OutputQueue::Pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !outputs_.empty(); })) return std::nullopt;
  RequestOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

RequestOutput OutputQueue::Pop() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !outputs_.empty(); });
  RequestOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

}  // namespace glint
