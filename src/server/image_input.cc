#include "server/image_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <span>

#include "base/file.h"

namespace glint::server {
namespace {

ApiError PartError(const std::string& param, const std::string& message) {
  return BadRequest(StrCat("'", param, "': ", message), param);
}

ApiOr<std::string> FromDataUrl(std::string_view url, const std::string& param, const ImageInputOptions& options) {
  // data:[<media type>][;base64],<data>
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return PartError(param, "a data: URL needs a ',' before its data");
  const std::string_view header = url.substr(5, comma - 5);
  if (!header.ends_with(";base64")) {
    return PartError(param, "only base64 data: URLs are accepted (data:image/png;base64,...)");
  }
  const std::string_view media_type = header.substr(0, header.size() - 7);
  const bool known = media_type == "image/png" || media_type == "image/jpeg" || media_type == "image/jpg" ||
                     media_type == "image/webp" || media_type == "image/gif";
  if (!known) {
    return PartError(param, StrCat("media type '", std::string(media_type.substr(0, 64)),
                                   "' is not supported: use image/png, image/jpeg, image/webp or image/gif"));
  }
  const std::string_view data = url.substr(comma + 1);
  // Checked before decoding: base64 carries 3 bytes per 4 characters.
  if (data.size() / 4 * 3 > options.limits.max_bytes) {
    return PartError(param, StrCat("the image is about ", data.size() / 4 * 3, " bytes; the limit is ",
                                   options.limits.max_bytes, " bytes (--max-image-bytes)"));
  }
  auto bytes = DecodeBase64(data);
  if (!bytes) return PartError(param, "the data: URL's base64 data is malformed");
  const auto format = media::SniffImageFormat({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()});
  const std::string_view declared = media_type == "image/jpg" ? "image/jpeg" : media_type;
  const std::string_view actual = format == media::ImageFormat::kPng    ? "image/png"
                                  : format == media::ImageFormat::kJpeg ? "image/jpeg"
                                  : format == media::ImageFormat::kWebp ? "image/webp"
                                  : format == media::ImageFormat::kGif  ? "image/gif"
                                                                        : "";
  if (!actual.empty() && actual != declared) {
    return PartError(param,
                     StrCat("the data says ", std::string(declared), " but the bytes are ", std::string(actual)));
  }
  return std::move(*bytes);
}

// The one answer for a path outside the allowed directory, missing, or reached through a symlink: a client may not
// learn which files exist outside it.
ApiError NotUnderAllowedPath(const std::string& param) {
  return PartError(param,
                   "no such file under --allowed-local-media-path (paths are taken as written: '..' may not leave "
                   "the directory, and symlinks are not followed)");
}

// Opens `relative` (lexically normal, no "..") beneath the directory `root`, one component at a time, none of them
// a symlink (O_NOFOLLOW), each opened from its parent's descriptor: a directory swapped for a symlink between a
// check and the open cannot lead outside, since there is no check apart from the open. -1 on any failure.
int OpenBeneath(const std::string& root, const std::filesystem::path& relative) {
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  auto component = relative.begin();
  while (dir >= 0 && component != relative.end()) {
    const std::string name = component->string();
    const bool last = std::next(component) == relative.end();
    const int flags = last ? O_RDONLY | O_NONBLOCK : O_PATH | O_DIRECTORY;
    const int next = name == ".." ? -1 : ::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    ::close(dir);
    dir = next;
    ++component;
  }
  return dir;
}

ApiOr<std::string> FromFileUrl(std::string_view url, const std::string& param, const ImageInputOptions& options) {
  if (options.allowed_local_media_path.empty()) {
    return PartError(param,
                     "file:// image URLs are refused: the server was started without "
                     "--allowed-local-media-path");
  }
  const std::string_view path = url.substr(7);
  if (!path.starts_with('/')) return PartError(param, "a file:// URL needs an absolute path (file:///dir/image.png)");
  if (path.find('%') != std::string_view::npos) return PartError(param, "percent-encoded file:// URLs are refused");
  std::error_code error;
  const auto root = std::filesystem::canonical(options.allowed_local_media_path, error);
  if (error) return PartError(param, "the server's --allowed-local-media-path does not resolve");
  // Lexically first: a path that is not under the directory as written is refused before anything is opened.
  const auto relative = std::filesystem::path(std::string(path)).lexically_normal().lexically_relative(root);
  if (relative.empty() || relative == "." || *relative.begin() == "..") return NotUnderAllowedPath(param);
  const int fd = OpenBeneath(root.string(), relative);
  if (fd < 0) return NotUnderAllowedPath(param);
  struct stat info {};
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  std::string bytes;
  if (regular && static_cast<size_t>(info.st_size) <= options.limits.max_bytes) {
    bytes.resize(static_cast<size_t>(info.st_size));
    size_t done = 0;
    for (ssize_t got = 1; done < bytes.size() && got > 0; done += got > 0 ? static_cast<size_t>(got) : 0) {
      got = ::read(fd, bytes.data() + done, bytes.size() - done);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (!regular) return PartError(param, "not a regular file");
  if (static_cast<size_t>(info.st_size) > options.limits.max_bytes) {
    return PartError(param, StrCat("the image file is ", info.st_size, " bytes; the limit is ",
                                   options.limits.max_bytes, " bytes (--max-image-bytes)"));
  }
  return bytes;
}

}  // namespace

std::optional<std::string> DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t buffer = 0;
  int bits = 0;
  for (const char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

ApiOr<std::string> LoadImageBytes(const std::string& url, const std::string& param, const ImageInputOptions& options) {
  const std::string_view view = url;
  if (view.starts_with("data:")) return FromDataUrl(view, param, options);
  if (view.starts_with("file://")) return FromFileUrl(view, param, options);
  if (view.starts_with("http://") || view.starts_with("https://")) {
    return PartError(param,
                     "remote image URLs are not fetched (glint does not go to the network): send the image "
                     "as a data: URL (data:image/png;base64,...)");
  }
  return PartError(param,
                   "an image URL must be a data: URL (data:image/png;base64,...) or, with "
                   "--allowed-local-media-path, a file:// URL");
}

DecodeGate::Slot::Slot(DecodeGate& gate) : gate_(gate) {
  std::unique_lock lock(gate_.mutex_);
  gate_.freed_.wait(lock, [&] { return gate_.free_ > 0; });
  --gate_.free_;
}

DecodeGate::Slot::~Slot() {
  {
    std::lock_guard lock(gate_.mutex_);
    ++gate_.free_;
  }
  gate_.freed_.notify_one();
}

namespace {

std::span<const uint8_t> AsBytes(const std::string& data) {
  return {reinterpret_cast<const uint8_t*>(data.data()), data.size()};
}

// The image tokens an image of this header becomes, whichever way its EXIF orientation (not read here) turns it.
ApiOr<int64_t> HeaderTokenCount(const media::ImageHeader& header, const std::string& param,
                                const media::ProcessorConfig& processor) {
  const int height = static_cast<int>(header.height), width = static_cast<int>(header.width);
  auto upright = media::ImageTokenCount(processor, height, width);
  if (!upright.ok()) return PartError(param, upright.status().message());
  auto turned = media::ImageTokenCount(processor, width, height);
  if (!turned.ok()) return PartError(param, turned.status().message());
  return std::max(upright.value(), turned.value());
}

// Every part's bytes, refused on their headers alone: nothing here decodes a pixel.
ApiOr<std::vector<std::string>> LoadAndCheckHeaders(const std::vector<ImagePart>& parts,
                                                    const ImageInputOptions& options) {
  std::vector<std::string> files;
  int64_t request_pixels = 0;
  for (const ImagePart& part : parts) {
    API_ASSIGN_OR_RETURN(std::string data, LoadImageBytes(part.url, part.param, options));
    auto header = media::ReadImageHeader(AsBytes(data), options.limits);
    if (!header.ok()) return PartError(part.param, header.status().message());
    API_ASSIGN_OR_RETURN(const int64_t tokens, HeaderTokenCount(*header, part.param, options.processor));
    if (options.max_tokens_per_image > 0 && tokens > options.max_tokens_per_image) {
      return PartError(part.param, StrCat("the ", header->width, "x", header->height, " image becomes ", tokens,
                                          " image tokens, more than the ", options.max_tokens_per_image,
                                          " one image may take (the engine's step budget, --max-batch-tokens)"));
    }
    request_pixels += header->pixels();
    if (request_pixels > options.max_request_pixels) {
      return PartError(part.param, StrCat("the request's images reach ", request_pixels,
                                          " pixels (width x height) with this one; the limit is ",
                                          options.max_request_pixels, " (--max-image-pixels-per-request)"));
    }
    files.push_back(std::move(data));
  }
  return files;
}

}  // namespace

ApiOr<std::vector<LoadedImage>> LoadImages(const std::vector<ImagePart>& parts, const ImageInputOptions& options) {
  API_ASSIGN_OR_RETURN(const std::vector<std::string> files, LoadAndCheckHeaders(parts, options));
  std::vector<LoadedImage> images;
  images.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const ImagePart& part = parts[i];
    const std::string& data = files[i];
    DecodeGate::Slot slot(*options.decode_gate);
    auto decoded = media::DecodeImage(AsBytes(data), options.limits);
    if (!decoded.ok()) return PartError(part.param, decoded.status().message());
    auto processed = media::PreprocessImage(decoded.value(), options.processor);
    if (!processed.ok()) return PartError(part.param, processed.status().message());
    images.push_back({part.param, XXH3_64bits(data.data(), data.size()), std::move(processed).value()});
  }
  return images;
}

ApiOr<std::vector<int32_t>> ExpandImageTokens(const std::vector<int32_t>& tokens, int32_t image_token_id,
                                              const std::vector<LoadedImage>& images, std::vector<size_t>* starts) {
  const auto placeholders = std::count(tokens.begin(), tokens.end(), image_token_id);
  if (placeholders != static_cast<int64_t>(images.size())) {
    return BadRequest(StrCat("the rendered prompt has ", placeholders, " image placeholders (token ", image_token_id,
                             ", the checkpoint's image_token_id) for ", images.size(),
                             " images (the chat template dropped or repeated an image part, or message text spelled "
                             "the placeholder while special tokens are allowed in content)"),
                      "messages");
  }
  std::vector<int32_t> out;
  int64_t total = static_cast<int64_t>(tokens.size());
  for (const LoadedImage& image : images) total += image.image.num_tokens() - 1;
  out.reserve(total);
  size_t next = 0;
  for (const int32_t token : tokens) {
    if (token != image_token_id) {
      out.push_back(token);
      continue;
    }
    if (starts != nullptr) starts->push_back(out.size());
    out.insert(out.end(), images[next++].image.num_tokens(), image_token_id);
  }
  return out;
}

std::vector<GenerationImage> ToGenerationImages(std::vector<LoadedImage> images, const std::vector<size_t>& starts) {
  std::vector<GenerationImage> out;
  for (size_t i = 0; i < images.size() && i < starts.size(); ++i) {
    auto input = std::make_shared<VisionInput>();
    media::PreprocessedImage& image = images[i].image;
    input->grid_t = image.grid_t;
    input->grid_h = image.grid_h;
    input->grid_w = image.grid_w;
    input->patches = std::move(image.patches);
    out.push_back({static_cast<int64_t>(starts[i]), std::move(input), images[i].bytes_hash});
  }
  return out;
}

}  // namespace glint::server
