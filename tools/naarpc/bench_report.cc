#include "tools/naarpc/bench_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace naarpc::cli::bench_internal {
namespace {

// A gnuplot single-quoted string.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// "64 B", "4 KiB", "1 MiB" (plot labels).
std::string SizeLabel(uint64_t b) {
  const std::string h = Human(b);
  return std::isdigit(static_cast<unsigned char>(h.back()))
             ? h + " B"
             : h.substr(0, h.size() - 1) + " " + h.back() + "iB";
}

std::string CsvHeader() {
  return "routine,transport,dialect,kind,size_bytes,clients,calls,bytes_per_call,p50_us,p90_us,"
         "p99_us,max_us,calls_per_s,mb_per_s\n";
}

std::string CsvRow(const std::string& routine, const BenchOptions& o, const Point& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s,%s,%s,%s,%llu,%d,%llu,%llu,%.2f,%.2f,%.2f,%.2f,%.1f,%.3f\n",
                routine.c_str(), o.transport.c_str(),
                o.client.dialect == Dialect::kSpec ? "spec" : "reference", p.kind.c_str(),
                static_cast<unsigned long long>(p.size), p.clients,
                static_cast<unsigned long long>(p.calls),
                static_cast<unsigned long long>(p.bytes_per_call), p.p50, p.p90, p.p99, p.max,
                p.calls_per_s, p.mb_per_s);
  return buf;
}

// gnuplot datablock "$name" of the points matching (kind, clients or any).
std::string Block(const std::string& name, const std::vector<Point>& points,
                  const std::string& kind, int clients, bool by_clients, uint64_t size) {
  std::string out = "$" + name + " << EOD\n";
  for (const Point& p : points) {
    if (p.kind != kind) continue;
    if (!by_clients && p.clients != clients) continue;
    if (by_clients && p.size != size) continue;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%llu %d %.3f %.3f %.3f %.3f %.3f\n",
                  static_cast<unsigned long long>(std::max<uint64_t>(p.size, 1)), p.clients, p.p50,
                  p.p99, p.calls_per_s, p.mb_per_s, p.max);
    out += buf;
  }
  return out + "EOD\n";
}

Status Plot(const std::string& prefix, const std::string& title, const std::vector<Point>& points,
            const BenchOptions& o, const std::vector<uint64_t>& sizes) {
  if (sizes.empty() || o.clients.empty()) return InternalError("--plot: nothing was measured");
  std::string s;
  s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
       "{ set terminal pngcairo size 960,600 noenhanced } "
       "else { set terminal png size 960,600 noenhanced }\n";
  s += "set grid\nset key top left\n";
  const bool log_x = sizes.size() > 1;
  // One colour per client count (latency, throughput) or size (scaling):
  // naarpc solid, its p99 dashed, raw dotted with open points.
  auto style = [](int i, int kind) {
    const std::string lc = " lc " + std::to_string(i + 1);
    switch (kind) {
      case 0:
        return "with linespoints" + lc + " pt 7";
      case 1:
        return "with linespoints" + lc + " dt 2 pt 7";
      default:
        return "with linespoints" + lc + " dt 3 pt 6";
    }
  };
  std::string lat = "plot ", thr = "plot ";
  int idx = 0;
  for (int c : o.clients) {
    const int i = idx++;
    const std::string n = std::to_string(i);
    s += Block("n" + n, points, "naarpc", c, false, 0);
    s += Block("r" + n, points, "raw", c, false, 0);
    const std::string cl = std::to_string(c) + (c == 1 ? " client" : " clients");
    lat += std::string(lat == "plot " ? "" : ", ") + "$n" + n + " using 1:3 " + style(i, 0) +
           " title 'naarpc p50, " + cl + "', $n" + n + " using 1:4 " + style(i, 1) +
           " title 'naarpc p99, " + cl + "'";
    thr += std::string(thr == "plot " ? "" : ", ") + "$n" + n + " using 1:6 " + style(i, 0) +
           " title 'naarpc, " + cl + "'";
    if (o.baseline) {
      lat += ", $r" + n + " using 1:3 " + style(i, 2) + " title 'raw p50, " + cl + "'";
      thr += ", $r" + n + " using 1:6 " + style(i, 2) + " title 'raw, " + cl + "'";
    }
  }
  std::string size_tics;
  for (uint64_t size : sizes) {
    size_tics += std::string(size_tics.empty() ? "" : ", ") + "'" + SizeLabel(size) + "' " +
                 std::to_string(std::max<uint64_t>(size, 1));
  }
  // Explicit x ranges with a margin: gnuplot omits the label of a tic that
  // falls on the edge of an autoscaled range (e.g. the largest size's).
  auto xrange = [](double lo, double hi) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "set xrange [%.17g:%.17g]\n", lo, hi);
    return std::string(buf);
  };
  const auto [min_size, max_size] = std::minmax_element(sizes.begin(), sizes.end());
  const double smallest = double(std::max<uint64_t>(*min_size, 1));
  const double largest = double(std::max<uint64_t>(*max_size, 1));
  s += "set xlabel 'payload bytes per call'\nset xtics (" + size_tics + ")\n";
  if (log_x) {
    s += "set logscale x 2\n" + xrange(smallest / 1.25, largest * 1.25);
  } else {
    s += xrange(smallest * 0.5, largest * 1.5);
  }
  s += "set output " + Quote(prefix + "_latency.png") + "\n";
  s += "set title " + Quote(title + ": latency vs size") +
       "\nset ylabel 'microseconds'\nset logscale y\n";
  s += lat + "\n";
  s += "set output " + Quote(prefix + "_throughput.png") + "\n";
  s += "set title " + Quote(title + ": throughput vs size") +
       "\nset ylabel 'MB/s (both directions)'\n";
  s += thr + "\n";
  // Scaling: calls/s vs clients, per size.
  std::string client_tics;
  for (int c : o.clients) client_tics += (client_tics.empty() ? "" : ", ") + std::to_string(c);
  s += "unset logscale x\nset logscale y\nset xlabel 'clients'\nset ylabel 'calls/s'\n";
  s += "set xtics (" + client_tics + ")\n";
  const auto [fewest, most] = std::minmax_element(o.clients.begin(), o.clients.end());
  const double client_margin = std::max(0.5, 0.05 * (*most - *fewest));
  s += xrange(*fewest - client_margin, *most + client_margin);
  std::string sc = "plot ";
  idx = 0;
  for (uint64_t size : sizes) {
    const int i = idx++;
    const std::string n = std::to_string(i);
    s += Block("s" + n, points, "naarpc", 0, true, size);
    s += Block("q" + n, points, "raw", 0, true, size);
    sc += std::string(sc == "plot " ? "" : ", ") + "$s" + n + " using 2:5 " + style(i, 0) +
          " title 'naarpc, " + SizeLabel(size) + "'";
    if (o.baseline) {
      sc += ", $q" + n + " using 2:5 " + style(i, 2) + " title 'raw, " + SizeLabel(size) + "'";
    }
  }
  s += "set output " + Quote(prefix + "_scaling.png") + "\n";
  s += "set title " + Quote(title + ": scaling vs clients") + "\n" + sc + "\nset output\n";

  const std::string log = prefix + "_gnuplot.log";
  const std::string script = prefix + "_plots.gp";
  {
    std::ofstream out(script);
    out << s;
    if (!out) return InternalError("--plot: cannot write " + script);
  }
  // gnuplot SCRIPT, its output into the log (no shell: any path works).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string arg0 = "gnuplot", arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return FailedPreconditionError(
        "--plot: cannot run gnuplot (" + std::string(std::strerror(spawned)) +
        "): install gnuplot-nox (apt-get install gnuplot-nox), or omit --plot; "
        "the CSV has the numbers");
  }
  int rc = 0;
  while (waitpid(pid, &rc, 0) < 0 && errno == EINTR) {
  }
  if (rc != 0) {
    return InternalError("--plot: gnuplot failed (exit " + std::to_string(WEXITSTATUS(rc)) +
                         "); its messages are in " + log + ", the script in " + script);
  }
  std::remove(log.c_str());
  return Status::Ok();
}

}  // namespace

std::string Human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) {
    std::snprintf(buf, sizeof buf, "%lluG", static_cast<unsigned long long>(b >> 30));
  } else if (b >= (1u << 20) && b % (1u << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%lluM", static_cast<unsigned long long>(b >> 20));
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%lluK", static_cast<unsigned long long>(b >> 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(b));
  }
  return buf;
}

Status WriteReports(const BenchOptions& o, const std::string& name,
                    const std::vector<Point>& points) {
  if (!o.csv_path.empty()) {
    std::ofstream csv(o.csv_path, std::ios::trunc);
    csv << CsvHeader();
    for (const Point& p : points) csv << CsvRow(name, o, p);
    if (!csv.flush()) return InternalError("--csv: cannot write " + o.csv_path);
    std::printf("CSV: %s\n", o.csv_path.c_str());
  }
  if (!o.plot_prefix.empty()) {
    std::vector<uint64_t> shown;
    for (const Point& p : points) {
      if (std::find(shown.begin(), shown.end(), p.size) == shown.end()) shown.push_back(p.size);
    }
    NAARPC_RETURN_IF_ERROR(Plot(o.plot_prefix, name, points, o, shown));
    std::printf("plots: %s_latency.png %s_throughput.png %s_scaling.png\n", o.plot_prefix.c_str(),
                o.plot_prefix.c_str(), o.plot_prefix.c_str());
  }
  return Status::Ok();
}

}  // namespace naarpc::cli::bench_internal
