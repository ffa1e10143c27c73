#!/usr/bin/env bash
# Regenerates the full `glint plan` output for the released model in docs/plan.md (between the
# plan-output markers). tests/cli/plan.sh fails when the doc and the binary disagree.
#   scripts/update-plan-doc.sh [path-to-glint]    (default: build/ci/src/cli/glint)
set -euo pipefail
cd "$(dirname "$0")/.."
glint="${1:-build/ci/src/cli/glint}"
doc=docs/plan.md
output="$("$glint" plan --format markdown)"
python3 - "$doc" "$output" <<'PY'
import sys
path, output = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- plan-output-begin -->\n", "<!-- plan-output-end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + output + "\n" + end + tail)
PY
echo "updated $doc"
