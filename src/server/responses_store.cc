#include "server/responses_store.h"

namespace glint::server {

bool ResponsesStore::Put(const std::string& id, Json response, Json items) {
  auto stored = std::make_shared<StoredResponse>();
  // Sized outside the lock: a conversation can be megabytes. Invalid UTF-8 cannot reach here (the server's own
  // text is sanitized), but `replace` keeps dump() from throwing whatever comes.
  stored->bytes = response.dump(-1, ' ', false, Json::error_handler_t::replace).size() +
                  items.dump(-1, ' ', false, Json::error_handler_t::replace).size() + id.size();
  stored->response = std::move(response);
  stored->items = std::move(items);
  if (max_responses_ == 0 || stored->bytes > max_bytes_) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  EraseLocked(id);
  while (!order_.empty() && (entries_.size() + 1 > max_responses_ || bytes_ + stored->bytes > max_bytes_)) {
    EraseLocked(order_.front());
  }
  bytes_ += stored->bytes;
  order_.push_back(id);
  entries_[id] = Entry{std::move(stored), std::prev(order_.end())};
  return true;
}

std::shared_ptr<const StoredResponse> ResponsesStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.stored;
}

bool ResponsesStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.find(id) == entries_.end()) return false;
  EraseLocked(id);
  return true;
}

void ResponsesStore::EraseLocked(const std::string& id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return;
  bytes_ -= it->second.stored->bytes;
  order_.erase(it->second.position);
  entries_.erase(it);
}

size_t ResponsesStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

size_t ResponsesStore::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace glint::server
