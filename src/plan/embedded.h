// Data files compiled into the binary by cmake/EmbedText.cmake (see src/plan/CMakeLists.txt), so `glint plan`
// needs no path at run time.
#pragma once

#include <string_view>

namespace glint::plan {

std::string_view HardwareCatalogueJson();  // data/hardware.json
std::string_view ReleaseConfigJson();      // data/glm-5.3-flash-config.json (the released model's config.json)

}  // namespace glint::plan
