// bench_sink_deliver: where a sink's memory goes, without BPF. One sink
// (open_sink, as the agent opens it) is handed the same spooled document N
// times under new keys, on the agent's spool thread layout (deliveries on a
// thread of their own); after each delivery one line of figures:
//
//   n  VmRSS_kB  RssAnon_kB  sqlite_kB  malloc_in_use_kB  malloc_free_kB  mmapped_kB  arenas
//
// sqlite_kB: sqlite3_memory_used() (its page cache, statements, schema);
// malloc_in_use / malloc_free: mallinfo2's uordblks and fordblks summed over
// the arenas (free: held by the allocator, not given back to the kernel);
// mmapped: hblkhd. RssAnon minus in-use is what the allocator keeps.
//
//   bench_sink_deliver URL DOCUMENT.json.gz N [--as-agent]
//
// --as-agent: the heap as the continuous agent sets it (agent/memory.h:
// bound_allocator() at start, release_free_memory() after each delivery);
// without it, glibc's defaults. The two tell the allocator's keeping from
// a leak.

#include <malloc.h>
#include <sqlite3.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "agent/memory.h"
#include "agent/sink.h"
#include "util/file_io.h"

using namespace mlprof::agent;

namespace {

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
      return std::stol(line.substr(n + 1));
  }
  return -1;
}

int arenas() {
  // malloc_info's <heap nr=...> elements: one per arena.
  char* buf = nullptr;
  size_t size = 0;
  FILE* mem = open_memstream(&buf, &size);
  malloc_info(0, mem);
  std::fclose(mem);
  int count = 0;
  for (const char* p = buf; (p = std::strstr(p, "<heap nr=")) != nullptr; ++p) ++count;
  std::free(buf);
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_sink_deliver URL DOCUMENT.json.gz N [--as-agent]\n");
    return 2;
  }
  const std::string url = argv[1], doc = argv[2];
  const int n = std::atoi(argv[3]);
  const bool as_agent = argc > 4 && std::strcmp(argv[4], "--as-agent") == 0;
  if (as_agent) bound_allocator();
  auto opened = open_sink(url);
  if (!opened) {
    std::fprintf(stderr, "bench_sink_deliver: %s\n", opened.error().message.c_str());
    return 1;
  }
  Sink& sink = *opened.value();
  std::printf(
      "n VmRSS_kB RssAnon_kB sqlite_kB malloc_in_use_kB malloc_free_kB mmapped_kB arenas\n");
  std::thread worker([&] {
    for (int i = 0; i < n; ++i) {
      SpoolItem item;
      item.path = doc;
      item.key = "bench_pid-1_20261128T053000Z_1." + std::to_string(i);
      item.labels = {{"pid", "1"}, {"node", "bench"}};
      item.sessions = 1;
      const Delivery d = sink.deliver(item);
      if (d.status != DeliveryStatus::kDelivered) {
        std::fprintf(stderr, "bench_sink_deliver: delivery %d: %s\n", i, d.detail.c_str());
        return;
      }
      if (as_agent) release_free_memory();
      const struct mallinfo2 mi = mallinfo2();
      std::printf("%d %ld %ld %" PRId64 " %zu %zu %zu %d\n", i + 1, status_kb("VmRSS"),
                  status_kb("RssAnon"), static_cast<int64_t>(sqlite3_memory_used() / 1024),
                  mi.uordblks / 1024, mi.fordblks / 1024, mi.hblkhd / 1024, arenas());
      std::fflush(stdout);
    }
  });
  worker.join();
  return 0;
}
