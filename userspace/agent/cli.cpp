// The program's plumbing (cli.h): the stop signals' handler and state,
// stderr and stdout.

#include "agent/cli.h"

#include <unistd.h>

#include <cstdio>

#include "util/utf8.h"

namespace mlprof::agent {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_signals = 0;

void on_stop_signal(int signo) {
  if (++g_stop_signals >= 3) {
    static const char kLine[] =
        "mlprof-ebpf: a third stop signal: exiting now; what was not written yet is discarded "
        "(-o is never partial; the spool keeps what it acknowledged)\n";
    ssize_t ignored = write(STDERR_FILENO, kLine, sizeof kLine - 1);
    (void)ignored;
    _exit(128 + signo);
  }
  if (g_stop_signal == 0) g_stop_signal = signo;
}

}  // namespace

struct sigaction install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sa;
}

void restart_stop_signals(struct sigaction& sa) {
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

bool hurried() { return g_stop_signals >= 2; }

const char* stop_signal_name() { return g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"; }

void say(const std::string& line) {
  std::fprintf(stderr, "mlprof-ebpf: %s\n", terminal_text(line, false).c_str());
}

bool write_stdout(const std::string& text) {
  if (text.empty()) return true;
  const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
  return std::fflush(stdout) == 0 && ok;
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace mlprof::agent
