#pragma once
// The mlprof-ebpf program's process-wide plumbing, shared by main.cpp's
// steps and the capture (capture.h): the stop signals' state, the lines it
// says on stderr and writes to stdout. Its clocks are clock.h's.
//
// The first SIGINT/SIGTERM stops the capture; a second skips what is left
// to wait for (the late records in the ring, the spool's delivery) but
// still writes what was captured; a third leaves at once, saying so. Two
// Ctrl-C in a row used to lose the whole capture without a word.

#include <signal.h>

#include <cstdint>
#include <string>

namespace mlprof::agent {

// Installs the SIGINT/SIGTERM handler (no SA_RESTART, so a poll returns at
// once) and ignores SIGPIPE (a closed stdout is an EPIPE, not a death
// without the -o file). Returns the action, for restart_stop_signals().
struct sigaction install_stop_signals();
// From the stop on: a stop signal interrupts no system call (a write to a
// pipe cut short would lose the summary): it only hurries what is left.
void restart_stop_signals(struct sigaction& sa);
// The first stop signal's number, 0 while none came.
int stop_signal();
// A second stop signal came: nothing more is waited for.
bool hurried();
// The stop signal's name for a line ("SIGINT").
const char* stop_signal_name();

// "mlprof-ebpf: LINE" on stderr, LINE as terminal_text (util/utf8.h) of one line.
void say(const std::string& line);
// Writes and flushes `text` to stdout; false on a failed write (EPIPE).
bool write_stdout(const std::string& text);
// "1 session", "2 sessions".
std::string plural(uint64_t n, const char* one, const char* many);

}  // namespace mlprof::agent
