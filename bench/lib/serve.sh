# shellcheck shell=bash
# Shared by the bench scripts that start `glint serve` (source it).
#
# serve_port LOG PID SECONDS: waits until the server writing LOG (process PID) says "serving … on http://…" and
# prints its port; fails (prints nothing, returns 1) when the process exits or SECONDS pass — the caller says so.
serve_port() {
  local log="$1" pid="$2" seconds="$3"
  for _ in $(seq 1 $((seconds * 10))); do
    grep -q "serving .* on http://" "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  local port
  port="$(sed -n 's|.*serving .* on http://[^:]*:\([0-9]*\).*|\1|p' "$log" | head -1)"
  [[ -n "$port" ]] || return 1
  echo "$port"
}
