// The Responses API's stored responses (`store`, `previous_response_id`, GET and DELETE /v1/responses/{id}): kept
// in memory only, bounded by a count and a byte total; adding past either bound evicts the oldest first. Entries
// are immutable once stored and shared with readers, so a lookup never copies a conversation under the lock.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/json_body.h"

namespace glint::server {

struct StoredResponse {
  Json response;  // the response object, as GET /v1/responses/{id} returns it
  // The conversation a follow-up continues: the previous response's items, this request's input items and this
  // response's output items, in the Responses API's item shapes. Instructions are not carried over (as OpenAI).
  Json items;
  size_t bytes = 0;  // the serialized size of both, what the byte bound counts
};

class ResponsesStore {
 public:
  // A bound of 0 stores nothing (store:true is then accepted and nothing is kept; the docs say so).
  ResponsesStore(size_t max_responses, size_t max_bytes) : max_responses_(max_responses), max_bytes_(max_bytes) {}

  // Stores (or replaces) `id`, evicting the oldest entries until both bounds hold. False when the entry alone is
  // larger than the byte bound (nothing is stored then).
  bool Put(const std::string& id, Json response, Json items);
  std::shared_ptr<const StoredResponse> Get(const std::string& id) const;
  bool Erase(const std::string& id);  // false when unknown

  size_t size() const;
  size_t bytes() const;

 private:
  void EraseLocked(const std::string& id);

  const size_t max_responses_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<std::string> order_;  // ids, oldest first
  struct Entry {
    std::shared_ptr<const StoredResponse> stored;
    std::list<std::string>::iterator position;  // in order_
  };
  std::unordered_map<std::string, Entry> entries_;
  size_t bytes_ = 0;
};

}  // namespace glint::server
