#include "quant/formats.h"

#include <array>

namespace glint {

uint8_t FloatToFp8E4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return sign | 0x7e;  // saturate to the largest finite value
  // Search the 127 non-negative finite codes, which are ordered by value, for the nearest; ties to even code.
  // Encoding only runs when writing checkpoints (make-tiny, tests), so clarity beats speed here.
  int low = 0;
  int high = 0x7e;
  while (high - low > 1) {
    int middle = (low + high) / 2;
    if (Fp8E4m3ToFloat(static_cast<uint8_t>(middle)) <= magnitude) {
      low = middle;
    } else {
      high = middle;
    }
  }
  const float below = Fp8E4m3ToFloat(static_cast<uint8_t>(low));
  const float above = Fp8E4m3ToFloat(static_cast<uint8_t>(high));
  int code;
  if (magnitude - below < above - magnitude) {
    code = low;
  } else if (magnitude - below > above - magnitude) {
    code = high;
  } else {
    code = (low % 2 == 0) ? low : high;
  }
  if (magnitude <= below) code = low;
  return static_cast<uint8_t>(sign | code);
}

const float* Fp8E4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) values[code] = Fp8E4m3ToFloat(static_cast<uint8_t>(code));
    return values;
  }();
  return table.data();
}

}  // namespace glint
