#include "server/json_body.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace glint::server {
namespace {

// Builds an ordered_json from SAX events. Each open array or object is a frame; a finished value is appended to
// the frame below it (objects through a key → position index, so a member costs O(1) whatever the object's size).
class Builder {
 public:
  explicit Builder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return Add(Json(nullptr)); }
  bool boolean(bool value) { return Add(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return Add(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return Add(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t&) { return Add(Json(value)); }
  bool string(Json::string_t& value) { return Add(Json(std::move(value))); }
  bool binary(Json::binary_t&) { return Add(Json(nullptr)); }  // never produced by the text parser
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool key(Json::string_t& name) {
    frames_.back().key = std::move(name);
    return true;
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    error_ = error.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& error() const { return error_; }
  Json& root() { return root_; }

 private:
  struct Frame {
    Json value;
    std::string key;                                // objects: the key of the member being read
    std::unordered_map<std::string, size_t> index;  // objects: key → position among the members
  };

  bool Open(Json value) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    frames_.push_back(Frame{std::move(value), {}, {}});
    return true;
  }
  bool Close() {
    Json value = std::move(frames_.back().value);
    frames_.pop_back();
    return Add(std::move(value));
  }
  bool Add(Json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return true;
    }
    Frame& frame = frames_.back();
    if (frame.value.is_array()) {
      frame.value.get_ref<Json::array_t&>().push_back(std::move(value));
      return true;
    }
    // ordered_map is a vector of pairs; appending to it directly skips its linear duplicate search.
    auto& members = static_cast<Json::object_t::Container&>(frame.value.get_ref<Json::object_t&>());
    const auto [it, inserted] = frame.index.try_emplace(frame.key, members.size());
    if (inserted) {
      members.emplace_back(std::move(frame.key), std::move(value));
    } else {
      members[it->second].second = std::move(value);
    }
    return true;
  }

  const int max_depth_;
  std::vector<Frame> frames_;
  Json root_;
  bool too_deep_ = false;
  std::string error_;
};

std::string TypeOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

}  // namespace

ApiOr<Json> ParseJsonObject(std::string_view body, int max_depth) {
  Builder builder(max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(body, &builder);
  } catch (const Json::exception& error) {  // out_of_range for numbers like 1e999
    return BadRequest(StrCat("the body is not valid JSON: ", error.what()));
  }
  if (builder.too_deep()) return BadRequest(StrCat("the JSON body is nested more than ", max_depth, " levels deep"));
  if (!ok) {
    // nlohmann reports ill-formed UTF-8 as a parse error naming the byte; both are "bad JSON" to the client.
    const std::string& what = builder.error();
    if (what.find("UTF-8") != std::string::npos || what.find("utf-8") != std::string::npos) {
      return BadRequest(StrCat("the body is not valid UTF-8: ", what));
    }
    return BadRequest(StrCat("the body is not valid JSON: ", what));
  }
  Json& root = builder.root();
  if (!root.is_object()) return BadRequest(StrCat("the body must be a JSON object, got ", TypeOf(root)));
  return std::move(root);
}

}  // namespace glint::server
