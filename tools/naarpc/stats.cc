#include "tools/naarpc/stats.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>
#include <tuple>

#include "runtime/httplib_config.h"
#include "tools/naarpc/cli_common.h"
#include "tools/naarpc/target.h"

namespace naarpc::cli {

namespace {

// How much of a bad answer an error quotes.
constexpr size_t kExcerptBytes = 80;

// The first kExcerptBytes of text ("..." after them), each byte outside
// printable ASCII as \xNN: no answer reaches the terminal raw or in full.
std::string Excerpt(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kExcerptBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > kExcerptBytes) out += "...";
  return out;
}

}  // namespace

Result<std::vector<MetricSample>> ParseExposition(const std::string& text) {
  std::vector<MetricSample> out;
  std::istringstream in(text);
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&] {
      return InvalidArgumentError(
          "metrics line " + std::to_string(number) + ": '" + Excerpt(line) + "'" +
          (line.size() > kExcerptBytes ? " (" + std::to_string(line.size()) + " bytes)" : ""));
    };
    MetricSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return bad();
        std::string key = line.substr(i, eq - i), value;
        i = eq + 2;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) return bad();
        ++i;  // closing quote
        if (i < line.size() && line[i] == ',') ++i;
        s.labels[key] = value;
      }
      if (i >= line.size()) return bad();
      ++i;  // }
    }
    if (i >= line.size() || line[i] != ' ') return bad();
    char* end = nullptr;
    const std::string value = line.substr(i + 1);
    s.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) return bad();
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

std::string Micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", seconds * 1e6);
  return buf;
}

std::string Count(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace

std::string StatsTable(const std::vector<MetricSample>& samples, const std::string& side) {
  using Key = std::tuple<std::string, std::string, std::string>;  // side, routine, peer
  struct Row {
    double calls = 0, in_flight = 0, sent = 0, received = 0, errors = 0;
    double p50 = 0, p90 = 0, p99 = 0, max = 0;
    std::string error_names;
  };
  std::map<Key, Row> rows;
  for (const MetricSample& s : samples) {
    if (s.name.rfind("naarpc_", 0) != 0) continue;
    auto get = [&](const char* k) {
      auto it = s.labels.find(k);
      return it == s.labels.end() ? std::string() : it->second;
    };
    const std::string row_side = get("side");
    if (side != "all" && row_side != side) continue;
    Row& r = rows[Key{row_side, get("routine"), get("peer")}];
    if (s.name == "naarpc_calls_total") r.calls = s.value;
    if (s.name == "naarpc_calls_in_flight") r.in_flight = s.value;
    if (s.name == "naarpc_call_bytes_sent_total") r.sent = s.value;
    if (s.name == "naarpc_call_bytes_received_total") r.received = s.value;
    if (s.name == "naarpc_call_errors_total") {
      r.errors += s.value;
      r.error_names += (r.error_names.empty() ? "" : " ") + get("status") + "=" + Count(s.value);
    }
    if (s.name == "naarpc_call_latency_seconds") {
      const std::string q = get("quantile");
      if (q == "0.5") r.p50 = s.value;
      if (q == "0.9") r.p90 = s.value;
      if (q == "0.99") r.p99 = s.value;
      if (q == "1") r.max = s.value;
    }
  }
  std::vector<std::vector<std::string>> table = {{"SIDE", "ROUTINE", "PEER", "CALLS", "ERRORS",
                                                  "IN_FLIGHT", "SENT_B", "RECEIVED_B", "P50_US",
                                                  "P90_US", "P99_US", "MAX_US"}};
  std::vector<std::string> notes;
  for (const auto& [key, r] : rows) {
    table.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), Count(r.calls),
                     Count(r.errors), Count(r.in_flight), Count(r.sent), Count(r.received),
                     Micros(r.p50), Micros(r.p90), Micros(r.p99), Micros(r.max)});
    if (!r.error_names.empty()) {
      notes.push_back(std::get<0>(key) + " " + std::get<1>(key) + " " + std::get<2>(key) +
                      " errors: " + r.error_names);
    }
  }
  std::vector<size_t> width(table[0].size(), 0);
  for (const auto& row : table) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : table) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      // Text columns left-aligned, numbers right-aligned.
      const std::string pad(width[c] - row[c].size(), ' ');
      line += c < 3 ? row[c] + pad : pad + row[c];
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (rows.empty()) out += "(no calls yet)\n";
  for (const std::string& n : notes) out += n + "\n";
  return out;
}

namespace {

// Why a TCP connection to host:port fails ("cannot connect: Connection
// refused", "cannot resolve ..."), found by connecting again: cpp-httplib 0.11
// reports only Error::Connection, and leaves errno at EINPROGRESS. "" if it
// connects now.
std::string ConnectProblem(const std::string& host, uint16_t port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) return "cannot resolve '" + host + "': " + gai_strerror(rc);
  std::string problem = "cannot connect: no address";
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      problem = std::string("cannot connect: ") + std::strerror(errno);
      continue;
    }
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = poll(&p, 1, timeout_ms);
      socklen_t len = sizeof err;
      if (ready == 0) {
        err = ETIMEDOUT;
      } else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
    close(fd);
    if (err == 0) {
      problem.clear();
      break;
    }
    problem = std::string("cannot connect: ") + std::strerror(err);
  }
  freeaddrinfo(list);
  return problem;
}

// Whether the text has a naarpc_ family: a sample, or (an endpoint that has
// seen no call yet) a family's # TYPE line.
bool HasNaarpcFamily(const std::string& text, const std::vector<MetricSample>& samples) {
  for (const MetricSample& s : samples) {
    if (s.name.rfind("naarpc_", 0) == 0) return true;
  }
  return text.rfind("# TYPE naarpc_", 0) == 0 || text.find("\n# TYPE naarpc_") != std::string::npos;
}

}  // namespace

int Stats(const StatsArgs& a) {
  auto target = ParseTarget(a.target);
  if (!target.ok()) return Fail(kExitUsage, target.status().message());
  if (a.target.find(':') == std::string::npos || a.target.back() == ']') {
    return Fail(kExitUsage, "--target needs the metrics port (HOST:PORT)");
  }
  // ParseTarget takes "HOST:" for the NAA's default port; a metrics port
  // has no default.
  if (a.target.back() == ':') {
    return Fail(kExitUsage, "--target '" + a.target + "': port '' is not a number in 1..65535");
  }
  constexpr int kConnectTimeoutS = 5, kReadTimeoutS = 10;
  const std::string url = "http://" + a.target + "/metrics";
  httplib::Client http(target->host, target->port);
  http.set_connection_timeout(kConnectTimeoutS);
  http.set_read_timeout(kReadTimeoutS);
  auto res = http.Get("/metrics");
  if (!res) {
    // httplib::to_string() is the enum's name ("Connection"): say what happened.
    std::string what;
    switch (res.error()) {
      case httplib::Error::Connection: {
        const std::string problem =
            ConnectProblem(target->host, target->port, kConnectTimeoutS * 1000);
        what = problem.empty() ? "cannot connect (a second attempt did)" : problem;
        break;
      }
      case httplib::Error::ConnectionTimeout:
        what = "cannot connect: no connection within " + std::to_string(kConnectTimeoutS) + " s";
        break;
      case httplib::Error::Read:
        what = "no HTTP response (the connection closed, or nothing came within " +
               std::to_string(kReadTimeoutS) +
               " s); is this the metrics port (serve --metrics-port), not the NAA's?";
        break;
      case httplib::Error::Write:
        what = "sending the request failed (the connection closed)";
        break;
      default:
        what = "the request failed (cpp-httplib error " + httplib::to_string(res.error()) + ")";
    }
    return Fail(kExitUnreachable, url + ": " + what);
  }
  if (res->status != 200) {
    return Fail(kExitUnreachable,
                url + " answered HTTP " + std::to_string(res->status) +
                    (res->reason.empty() ? "" : " (" + Excerpt(res->reason) + ")") +
                    "; is this the metrics port (serve --metrics-port)?");
  }
  if (a.raw) {
    std::fputs(res->body.c_str(), stdout);
    return kExitOk;
  }
  auto samples = ParseExposition(res->body);
  if (!samples.ok()) {
    return Fail(kExitFailure,
                url + ": not the Prometheus text format: " + samples.status().message());
  }
  if (!HasNaarpcFamily(res->body, *samples)) {
    return Fail(kExitFailure,
                "no naarpc_ metrics at " + url + " (is this a naarpc metrics endpoint?)");
  }
  std::fputs(StatsTable(*samples, a.side).c_str(), stdout);
  return kExitOk;
}

}  // namespace naarpc::cli
