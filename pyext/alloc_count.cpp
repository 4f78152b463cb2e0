#include "alloc_count.h"

#include <Python.h>

namespace mlprof::alloc_count {
namespace {

// The default TLS model (a __tls_get_addr call per allocation): initial-exec
// would be a plain load, but the dlopen'ed extension then fails to import
// ("cannot allocate memory in static TLS block": glibc's surplus is shared).
thread_local uint64_t t_bytes = 0;

// The wrapped domains. PYMEM_DOMAIN_RAW is left alone: pymalloc hands its
// large requests to the raw allocator, so wrapping it too would count those
// twice, and the raw domain is called without the GIL, where swapping its
// functions at run time races with other threads.
constexpr PyMemAllocatorDomain kDomains[] = {PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
constexpr int kDomainCount = 2;

// One installation of the wrapper: the allocators it chains to, one per
// domain. An installation that another hook (tracemalloc, a debugger) has
// since wrapped cannot be taken out (that hook would chain to freed or
// restored functions): it stays, passing through, and counts only while it
// is the active one. A later start() reuses it once it is on top again.
struct Slot {
  PyMemAllocatorEx prev[kDomainCount];
  bool installed = false;
  bool counting = false;
};
constexpr int kSlots = 8;
Slot g_slots[kSlots];
Slot* g_active = nullptr;  // the slot that counts; null when nobody counts
int g_users = 0;           // sessions counting

struct Ctx {
  Slot* slot;
  int domain;
};
Ctx g_ctx[kSlots][kDomainCount];

inline const PyMemAllocatorEx& prev_of(void* ctx) {
  auto* c = static_cast<Ctx*>(ctx);
  return c->slot->prev[c->domain];
}
inline void count(void* ctx, size_t n) {
  if (static_cast<Ctx*>(ctx)->slot->counting) t_bytes += n;
}

void* wrap_malloc(void* ctx, size_t size) {
  count(ctx, size);
  const PyMemAllocatorEx& p = prev_of(ctx);
  return p.malloc(p.ctx, size);
}
void* wrap_calloc(void* ctx, size_t nelem, size_t elsize) {
  count(ctx, nelem * elsize);
  const PyMemAllocatorEx& p = prev_of(ctx);
  return p.calloc(p.ctx, nelem, elsize);
}
// The new size, all of it (the old size is not known without a table of
// every block): growing a list by doubling counts each step's full size,
// as jemalloc's thread.allocated does.
void* wrap_realloc(void* ctx, void* ptr, size_t size) {
  count(ctx, size);
  const PyMemAllocatorEx& p = prev_of(ctx);
  return p.realloc(p.ctx, ptr, size);
}
void wrap_free(void* ctx, void* ptr) {
  const PyMemAllocatorEx& p = prev_of(ctx);
  p.free(p.ctx, ptr);
}

// Whether `slot` is the allocator now in place, in every wrapped domain.
bool on_top(Slot* slot) {
  const int k = static_cast<int>(slot - g_slots);
  for (int d = 0; d < kDomainCount; ++d) {
    PyMemAllocatorEx now{};
    PyMem_GetAllocator(kDomains[d], &now);
    if (now.malloc != wrap_malloc || now.ctx != &g_ctx[k][d]) return false;
  }
  return true;
}

}  // namespace

uint64_t thread_bytes() { return t_bytes; }

bool start(std::string* why) {
#ifdef Py_GIL_DISABLED
  // The free-threaded collector finds objects by walking mimalloc's heaps,
  // and objects must come from the allocator it expects; a wrapper that
  // chains would keep that, but swapping allocators while other threads
  // allocate without a GIL is not safe through this API.
  *why =
      "alloc_bytes is not supported on a free-threaded build of Python; no allocated bytes are "
      "recorded";
  return false;
#else
  if (g_users > 0) {
    ++g_users;
    return true;
  }
  Slot* use = nullptr;
  for (Slot& s : g_slots) {  // an installation on top again (the hook above it left)
    if (s.installed && on_top(&s)) use = &s;
  }
  if (!use) {
    for (Slot& s : g_slots) {
      if (!s.installed) {
        use = &s;
        break;
      }
    }
    if (!use) {
      *why =
          "alloc_bytes: other allocator hooks were installed over this one too many times; no "
          "allocated "
          "bytes are recorded";
      return false;
    }
    const int k = static_cast<int>(use - g_slots);
    for (int d = 0; d < kDomainCount; ++d) {
      PyMem_GetAllocator(kDomains[d], &use->prev[d]);
      g_ctx[k][d] = Ctx{use, d};
      PyMemAllocatorEx mine{&g_ctx[k][d], wrap_malloc, wrap_calloc, wrap_realloc, wrap_free};
      PyMem_SetAllocator(kDomains[d], &mine);
    }
    use->installed = true;
  }
  use->counting = true;
  g_active = use;
  g_users = 1;
  return true;
#endif
}

void stop() {
  if (g_users <= 0 || --g_users > 0) return;
  Slot* s = g_active;
  g_active = nullptr;
  if (!s) return;
  s->counting = false;
  if (!on_top(s))
    return;  // wrapped since, or taken out by whoever it wrapped: stays, passing through
  // Taken out only when every domain still chains to what it wrapped at
  // install; blocks allocated through it are freed by those same functions.
  for (int d = 0; d < kDomainCount; ++d) PyMem_SetAllocator(kDomains[d], &s->prev[d]);
  s->installed = false;
}

}  // namespace mlprof::alloc_count
