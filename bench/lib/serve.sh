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

# serve_stop PID: SIGTERM, then waits up to 60 s for the server to exit (it drains); returns 1 if it did not.
serve_stop() {
  local pid="$1"
  kill -TERM "$pid"
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && return 1
  wait "$pid" || true
}
