// A hostile-load client for `glint serve` (docs/server.md "Load held"): idle keep-alive connections, slowloris
// connections that drip header lines, and streams that generate, all at once on loopback, while /health is timed.
// Afterwards it checks that the server let go of everything: connections, requests in flight, engine queues, and
// resident memory back near where it started.
//
//   serve_load --port P --pid PID [--idle 2000] [--slowloris 500] [--streams 64] [--seconds 12]
//              [--disconnect-percent 0] [--max-tokens 32] [--no-checks]
//
// --disconnect-percent N: each stream is dropped mid-way with probability N % (the soak benchmark). The client
// raises its own open-file limit to the hard limit (2,600 sockets need more than the common 1,024).
// Exit status: 0 when every check passed, 1 otherwise (each failed check is printed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int port = 0;
  int pid = 0;
  int idle = 2000;
  int slowloris = 500;
  int streams = 64;
  double seconds = 12;
  int disconnect_percent = 0;
  int max_tokens = 32;
  bool checks = true;
};

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one Content-Length response; its status, or 0.
int ReadReply(int fd, std::string* body = nullptr) {
  std::string head;
  char byte = 0;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (recv(fd, &byte, 1, 0) != 1) return 0;
    head += byte;
  }
  const size_t at = head.find("Content-Length: ");
  size_t length = at == std::string::npos ? 0 : std::strtoul(head.c_str() + at + 16, nullptr, 10);
  std::string data(length, '\0');
  size_t got = 0;
  while (got < length) {
    const ssize_t n = recv(fd, data.data() + got, length - got, 0);
    if (n <= 0) return 0;
    got += static_cast<size_t>(n);
  }
  if (body != nullptr) *body = std::move(data);
  return head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
}

// GET on a fresh connection; the status (0: no answer).
int Get(int port, const std::string& path, std::string* body = nullptr) {
  const int fd = Connect(port);
  if (fd < 0) return 0;
  SendAll(fd, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  const int status = ReadReply(fd, body);
  close(fd);
  return status;
}

int64_t ResidentKiB(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

double Metric(const std::string& body, const std::string& name) {
  std::istringstream lines(body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
  }
  return -1;
}

// One streamed chat completion; true when it ended with [DONE]. With `drop`, the connection is closed after the
// first event instead.
bool Stream(int port, int max_tokens, bool drop) {
  const int fd = Connect(port);
  if (fd < 0) return false;
  const std::string body =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story\"}], \"stream\": true, "
      "\"max_tokens\": " +
      std::to_string(max_tokens) + ", \"ignore_eos\": true}";
  SendAll(fd,
          "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
          "Content-Type: application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string received;
  char buffer[16384];
  bool done = false;
  while (!done) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    received.append(buffer, static_cast<size_t>(n));
    if (drop && received.find("data: ") != std::string::npos) break;
    done = received.find("data: [DONE]") != std::string::npos;
  }
  close(fd);
  return done;
}

struct Figures {
  std::atomic<int64_t> streams_done{0};
  std::atomic<int64_t> streams_failed{0};
  std::atomic<int64_t> streams_dropped{0};
  std::atomic<int64_t> slowloris_closed{0};
};

void RaiseFileLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atof(argv[++i]) : 0.0; };
    if (flag == "--port")
      o.port = static_cast<int>(next());
    else if (flag == "--pid")
      o.pid = static_cast<int>(next());
    else if (flag == "--idle")
      o.idle = static_cast<int>(next());
    else if (flag == "--slowloris")
      o.slowloris = static_cast<int>(next());
    else if (flag == "--streams")
      o.streams = static_cast<int>(next());
    else if (flag == "--seconds")
      o.seconds = next();
    else if (flag == "--disconnect-percent")
      o.disconnect_percent = static_cast<int>(next());
    else if (flag == "--max-tokens")
      o.max_tokens = static_cast<int>(next());
    else if (flag == "--no-checks")
      o.checks = false;
    else {
      std::fprintf(stderr, "serve_load: unknown flag %s (see the comment at the top of serve_load.cc)\n", argv[i]);
      std::exit(2);
    }
  }
  if (o.port <= 0 || o.pid <= 0) {
    std::fprintf(stderr, "serve_load: --port and --pid are required\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  RaiseFileLimit();
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    if (!ok && o.checks) ++failures;
  };

  // Warm up with as many concurrent streams as the load runs: the engine's state slots and cache blocks are
  // touched (paged in) the first time that many sequences run, which is not growth. Then take the baseline.
  {
    std::vector<std::thread> warm;
    for (int i = 0; i < o.streams; ++i) warm.emplace_back([&] { Stream(o.port, o.max_tokens, false); });
    for (auto& thread : warm) thread.join();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t rss_start = ResidentKiB(o.pid);

  // Idle keep-alive connections: one request each, then silence.
  std::vector<int> idle;
  for (int i = 0; i < o.idle; ++i) {
    const int fd = Connect(o.port);
    if (fd < 0) break;
    SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    if (ReadReply(fd) != 200) {
      close(fd);
      break;
    }
    idle.push_back(fd);
  }
  check(static_cast<int>(idle.size()) == o.idle, "idle keep-alive connections open: " + std::to_string(idle.size()));

  Figures figures;
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  // Slowloris: a request line, then a header line per second, never the end of the headers.
  std::thread slowloris([&] {
    std::vector<int> fds;
    for (int i = 0; i < o.slowloris; ++i) {
      const int fd = Connect(o.port);
      if (fd >= 0 && SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")) fds.push_back(fd);
    }
    while (!stop.load()) {
      for (int& fd : fds) {
        char reply = 0;  // the server's 408 (or its close) ends a slowloris client
        const bool answered = fd >= 0 && recv(fd, &reply, 1, MSG_DONTWAIT) >= 0;
        if (fd >= 0 && (answered || !SendAll(fd, "X-Drip: 1\r\n"))) {
          close(fd);
          fd = -1;
          figures.slowloris_closed.fetch_add(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  std::vector<std::thread> streams;
  for (int i = 0; i < o.streams; ++i) {
    streams.emplace_back([&, i] {
      std::mt19937 random(static_cast<uint32_t>(i));
      while (!stop.load()) {
        const bool drop = static_cast<int>(random() % 100) < o.disconnect_percent;
        if (drop) {
          Stream(o.port, o.max_tokens, true);
          figures.streams_dropped.fetch_add(1);
        } else if (Stream(o.port, o.max_tokens, false)) {
          figures.streams_done.fetch_add(1);
        } else {
          figures.streams_failed.fetch_add(1);
        }
      }
    });
  }
  std::vector<double> health_ms;
  int64_t health_failed = 0;
  int64_t rss_peak = rss_start;
  while (Since(start) < o.seconds) {
    const auto probe = Clock::now();
    if (Get(o.port, "/health") == 200) {
      health_ms.push_back(Since(probe) * 1000);
    } else {
      ++health_failed;
    }
    rss_peak = std::max(rss_peak, ResidentKiB(o.pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop.store(true);
  for (auto& thread : streams) thread.join();
  slowloris.join();
  for (int fd : idle) close(fd);

  std::sort(health_ms.begin(), health_ms.end());
  const double median = health_ms.empty() ? 1e9 : health_ms[health_ms.size() / 2];
  const double p99 = health_ms.empty() ? 1e9 : health_ms[health_ms.size() * 99 / 100];
  std::printf("streams: %lld completed, %lld failed, %lld dropped on purpose in %.1f s\n",
              static_cast<long long>(figures.streams_done.load()),
              static_cast<long long>(figures.streams_failed.load()),
              static_cast<long long>(figures.streams_dropped.load()), Since(start));
  std::printf("/health: %zu probes, median %.1f ms, p99 %.1f ms, %lld failed\n", health_ms.size(), median, p99,
              static_cast<long long>(health_failed));
  std::printf("slowloris connections closed by the server: %lld of %d\n",
              static_cast<long long>(figures.slowloris_closed.load()), o.slowloris);
  check(figures.slowloris_closed.load() == o.slowloris || o.seconds < 12, "every slowloris client cut off (408)");
  check(median < 200, "/health median below 200 ms");
  check(health_failed == 0, "/health always answered");
  check(figures.streams_done.load() >= o.streams, "every stream slot completed at least one stream");
  check(figures.streams_failed.load() == 0, "no stream failed");

  // Everything lets go: poll /metrics for up to 10 s (closes and cancellations land within the engine's steps).
  std::string body;
  bool drained = false;
  for (int i = 0; i < 100 && !drained; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Get(o.port, "/metrics", &body) != 200) continue;
    drained = Metric(body, "glint_http_connections_active") <= 1 && Metric(body, "glint_http_requests_active") <= 1 &&
              Metric(body, "glint_server_requests_in_flight") == 0 && Metric(body, "glint_requests_running") == 0 &&
              Metric(body, "glint_requests_waiting") == 0 && Metric(body, "glint_kv_blocks_used") == 0;
  }
  std::printf(
      "after: connections %.0f (this scrape's), requests %.0f, in flight %.0f, running %.0f, waiting %.0f, "
      "kv blocks used %.0f\n",
      Metric(body, "glint_http_connections_active"), Metric(body, "glint_http_requests_active"),
      Metric(body, "glint_server_requests_in_flight"), Metric(body, "glint_requests_running"),
      Metric(body, "glint_requests_waiting"), Metric(body, "glint_kv_blocks_used"));
  check(drained, "every pool back to zero (connections, requests, in flight, running, waiting, KV blocks)");
  // The server hands freed memory back once it is idle (every 2 s): give it up to 5 s.
  int64_t rss_end = ResidentKiB(o.pid);
  for (int i = 0; i < 50 && rss_end > rss_start * 11 / 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rss_end = ResidentKiB(o.pid);
  }
  std::printf("server RSS: %lld KiB at the start, %lld KiB at the peak, %lld KiB after\n",
              static_cast<long long>(rss_start), static_cast<long long>(rss_peak), static_cast<long long>(rss_end));
  check(rss_end <= rss_start * 11 / 10, "RSS after within 10 % of the start");
  return failures == 0 ? 0 : 1;
}
