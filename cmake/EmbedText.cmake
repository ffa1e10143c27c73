# Turns a text file into a C++ source defining `std::string_view glint::<NAMESPACE>::<SYMBOL>()` that returns
# the file's contents, so the binary carries its data files (hardware catalogue, release config, the web UI) and needs
# no path at run time.
# Usage: cmake -DINPUT=file -DOUTPUT=file.cc -DSYMBOL=Name [-DNAMESPACE=server] -P EmbedText.cmake
# (NAMESPACE is the part after glint::, plan by default.)
if(NOT DEFINED NAMESPACE)
  set(NAMESPACE plan)
endif()
file(READ "${INPUT}" text)
set(delimiter "glint_embedded")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter ')${delimiter}\"'")
endif()
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${INPUT} by cmake/EmbedText.cmake. Do not edit.
#include <string_view>

namespace glint::${NAMESPACE} {
std::string_view ${SYMBOL}() {
  static constexpr char kText[] = R\"${delimiter}(${text})${delimiter}\";
  return {kText, sizeof(kText) - 1};
}
}  // namespace glint::${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
