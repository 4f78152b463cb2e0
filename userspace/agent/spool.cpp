#include "agent/spool.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "agent/clock.h"
#include "agent/json_parse.h"
#include "agent/memory.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

constexpr const char* kDocSuffix = ".json.gz";
constexpr const char* kItemSuffix = ".item";
constexpr int kMetaVersion = 1;

// CLOCK_MONOTONIC now, in ms (the health probe reads the same clock).
int64_t mono_ms() { return now_ns() / 1'000'000; }

// mkdir -p.
int make_dirs(const std::string& path) {
  if (path.empty()) return ENOENT;
  std::string at;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    at = path.substr(0, pos);
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

std::string meta_json(const SpoolItem& item, uint64_t doc_bytes) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("version");
  w.Int(kMetaVersion);
  w.Key("key");
  w.String(item.key.c_str(), static_cast<rapidjson::SizeType>(item.key.size()));
  w.Key("labels");
  w.StartObject();
  for (const auto& [k, v] : item.labels) {
    w.Key(k.c_str(), static_cast<rapidjson::SizeType>(k.size()));
    w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
  }
  w.EndObject();
  w.Key("period_start_unix_ns");
  w.Int64(item.period_start_unix_ns);
  w.Key("period_end_unix_ns");
  w.Int64(item.period_end_unix_ns);
  w.Key("sessions");
  w.Uint64(item.sessions);
  w.Key("spans");
  w.Uint64(item.spans);
  w.Key("document_bytes");
  w.Uint64(doc_bytes);
  w.Key("sink");
  w.String(item.sink.c_str(), static_cast<rapidjson::SizeType>(item.sink.size()));
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

// The .item text back; false when it is not one (cut short, another
// version, a field missing). "sink" may be missing (an older agent's item:
// its sink was not recorded).
bool parse_meta(const std::string& text, SpoolItem& item, uint64_t& doc_bytes) {
  rapidjson::Document d;
  if (!parse_json_iterative(d, text) || !d.IsObject()) return false;
  auto member = [&](const char* name) -> const rapidjson::Value* {
    auto it = d.FindMember(name);
    return it == d.MemberEnd() ? nullptr : &it->value;
  };
  const auto* version = member("version");
  const auto* key = member("key");
  const auto* labels = member("labels");
  const auto* start = member("period_start_unix_ns");
  const auto* end = member("period_end_unix_ns");
  const auto* sessions = member("sessions");
  const auto* spans = member("spans");
  const auto* bytes = member("document_bytes");
  const auto* sink = member("sink");
  if (!version || !version->IsInt() || version->GetInt() != kMetaVersion || !key ||
      !key->IsString() || key->GetStringLength() == 0 || !labels || !labels->IsObject() || !start ||
      !start->IsInt64() || !end || !end->IsInt64() || !sessions || !sessions->IsUint64() ||
      !spans || !spans->IsUint64() || !bytes || !bytes->IsUint64() || (sink && !sink->IsString())) {
    return false;
  }
  item.sink = sink ? sink->GetString() : "";
  item.key = key->GetString();
  item.labels.clear();
  for (const auto& m : labels->GetObject()) {
    if (!m.value.IsString()) return false;
    item.labels[m.name.GetString()] = m.value.GetString();
  }
  item.period_start_unix_ns = start->GetInt64();
  item.period_end_unix_ns = end->GetInt64();
  item.sessions = sessions->GetUint64();
  item.spans = spans->GetUint64();
  doc_bytes = bytes->GetUint64();
  return true;
}

// "0000000000000042" -> 42; nullopt for any other name.
bool parse_seq(const std::string& stem, uint64_t& seq) {
  if (stem.size() != 16 ||
      !std::all_of(stem.begin(), stem.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  seq = std::strtoull(stem.c_str(), nullptr, 10);
  return seq != 0;
}

}  // namespace

int64_t Backoff::ceiling_ms(uint64_t failures) const {
  int64_t d = std::max<int64_t>(initial_ms, 1);
  for (uint64_t i = 1; i < failures && d < max_ms; ++i) d *= 2;
  return std::min(d, std::max<int64_t>(max_ms, 1));
}

Spool::Spool(std::string dir, SpoolLimits limits, Backoff backoff, std::string sink)
    : dir_(std::move(dir)),
      limits_(limits),
      backoff_(backoff),
      sink_(std::move(sink)),
      rng_(std::random_device{}()) {}

Spool::~Spool() { stop(); }

Result<std::unique_ptr<Spool>> Spool::open(const std::string& dir, SpoolLimits limits,
                                           Backoff backoff, std::string sink) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (int e = make_dirs(d); e != 0) {
    return Error{Error::Kind::kIo, e,
                 "cannot create the spool directory " + d + ": " + std::strerror(e)};
  }
  std::unique_ptr<Spool> spool(new Spool(d, limits, backoff, std::move(sink)));
  if (auto r = spool->resume(); !r) return r.error();
  return spool;
}

std::string Spool::base(uint64_t seq) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016" PRIu64, seq);
  return dir_ + "/" + name;
}

Result<Ok> Spool::resume() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) {
    const int e = errno;
    return Error{Error::Kind::kIo, e,
                 "cannot list the spool directory " + dir_ + ": " + std::strerror(e)};
  }
  std::map<uint64_t, bool> items;  // seq -> has its document
  std::vector<std::string> docs, temporaries;
  while (dirent* ent = ::readdir(d)) {
    const std::string name = ent->d_name;
    uint64_t seq = 0;
    if (name.starts_with('.') && name.find(".tmp-") != std::string::npos) {
      temporaries.push_back(name);  // write_file_atomic's, of a write a crash cut short
    } else if (name.ends_with(kItemSuffix) && parse_seq(name.substr(0, name.size() - 5), seq)) {
      items.emplace(seq, false);
    } else if (name.ends_with(kDocSuffix) && parse_seq(name.substr(0, name.size() - 8), seq)) {
      docs.push_back(name);
    }
  }
  ::closedir(d);
  std::lock_guard<std::mutex> lock(mu_);
  resume_set_aside("corrupt");
  resume_set_aside("rejected");
  for (const std::string& t : temporaries) ::unlink((dir_ + "/" + t).c_str());
  for (const std::string& doc : docs) {
    uint64_t seq = 0;
    parse_seq(doc.substr(0, doc.size() - 8), seq);
    next_seq_ = std::max(next_seq_, seq + 1);
    if (auto it = items.find(seq); it != items.end()) {
      it->second = true;
    } else {
      ::unlink(
          (dir_ + "/" + doc).c_str());  // never acknowledged, or delivered: its .item went first
    }
  }
  for (const auto& [seq, has_doc] : items) {
    next_seq_ = std::max(next_seq_, seq + 1);
    const std::string b = base(seq);
    Entry e;
    e.seq = seq;
    uint64_t doc_bytes = 0;
    auto text = read_file(b + kItemSuffix);
    const off_t actual = has_doc ? file_size(b + kDocSuffix) : -1;
    if (!text || !parse_meta(text.value(), e.item, doc_bytes) || actual < 0 ||
        static_cast<uint64_t>(actual) != doc_bytes) {
      set_aside_locked(seq, "corrupt");
      ++stats_.corrupt;
      continue;
    }
    e.item.path = b + kDocSuffix;
    e.bytes = doc_bytes + text.value().size();
    e.other = e.item.sink != sink_;
    bytes_ += e.bytes;
    if (!e.other) ++stats_.resumed;
    entries_.push_back(std::move(e));
  }
  // Bounds that shrank since the last run: set-aside items first, then the
  // oldest items.
  while (!set_aside_.empty() && bytes_ > limits_.max_bytes) remove_set_aside_locked();
  while (!entries_.empty() && (entries_.size() > limits_.max_items || bytes_ > limits_.max_bytes)) {
    remove_entry_locked(0);
    ++stats_.dropped_bound;
  }
  return Ok{};
}

void Spool::resume_set_aside(const std::string& where) {
  const std::string sub = dir_ + "/" + where;
  DIR* d = ::opendir(sub.c_str());
  if (d == nullptr) return;            // none yet
  std::map<uint64_t, uint64_t> found;  // seq -> bytes of its files
  while (dirent* ent = ::readdir(d)) {
    const std::string name = ent->d_name;
    uint64_t seq = 0;
    const bool item =
        name.ends_with(kItemSuffix) && parse_seq(name.substr(0, name.size() - 5), seq);
    if (!item && !(name.ends_with(kDocSuffix) && parse_seq(name.substr(0, name.size() - 8), seq)))
      continue;
    const off_t size = file_size(sub + "/" + name);
    found[seq] += size > 0 ? static_cast<uint64_t>(size) : 0;
  }
  ::closedir(d);
  for (const auto& [seq, bytes] : found) {
    next_seq_ = std::max(next_seq_, seq + 1);  // a new item is never named as a set-aside one
    const SetAside a{seq, where, bytes};
    set_aside_.insert(
        std::upper_bound(set_aside_.begin(), set_aside_.end(), a,
                         [](const SetAside& x, const SetAside& y) { return x.seq < y.seq; }),
        a);
    bytes_ += bytes;
  }
  while (set_aside_.size() > kMaxSetAside) remove_set_aside_locked();
}

void Spool::set_aside_locked(uint64_t seq, const std::string& where) {
  const std::string to = dir_ + "/" + where;
  ::mkdir(to.c_str(), 0755);
  const std::string base_path = base(seq);
  SetAside a{seq, where, 0};
  for (const char* suffix : {kItemSuffix, kDocSuffix}) {
    const std::string from = base_path + suffix;
    const std::string dest = to + from.substr(from.rfind('/'));
    if (::rename(from.c_str(), dest.c_str()) != 0) {
      ::unlink(from.c_str());
    } else if (const off_t size = file_size(dest); size > 0) {
      a.bytes += static_cast<uint64_t>(size);
    }
  }
  set_aside_.insert(
      std::upper_bound(set_aside_.begin(), set_aside_.end(), a,
                       [](const SetAside& x, const SetAside& y) { return x.seq < y.seq; }),
      a);
  bytes_ += a.bytes;
  while (set_aside_.size() > kMaxSetAside) remove_set_aside_locked();
}

void Spool::remove_set_aside_locked() {
  const SetAside& a = set_aside_.front();
  char name[32];
  std::snprintf(name, sizeof name, "/%016" PRIu64, a.seq);
  const std::string b = dir_ + "/" + a.where + name;
  ::unlink((b + kItemSuffix).c_str());
  ::unlink((b + kDocSuffix).c_str());
  bytes_ -= std::min(bytes_, a.bytes);
  set_aside_.pop_front();
  ++stats_.set_aside_removed;
}

void Spool::remove_entry_locked(size_t i) {
  const std::string b = base(entries_[i].seq);
  ::unlink(
      (b + kItemSuffix).c_str());  // first: a crash now leaves a lone document, removed at open
  ::unlink((b + kDocSuffix).c_str());
  bytes_ -= std::min(bytes_, entries_[i].bytes);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
  changed_.notify_all();
}

bool Spool::make_room_locked(uint64_t bytes, size_t items) {
  if (bytes > limits_.max_bytes || items > limits_.max_items) return false;
  // Set-aside items are kept to be looked at, not delivered: they go first.
  while (!set_aside_.empty() && bytes_ + bytes > limits_.max_bytes) remove_set_aside_locked();
  size_t i = 0;
  while (i < entries_.size() &&
         (entries_.size() + items > limits_.max_items || bytes_ + bytes > limits_.max_bytes)) {
    if (entries_[i].in_flight) {
      ++i;
      continue;
    }
    remove_entry_locked(i);
    ++stats_.dropped_bound;
  }
  return entries_.size() + items <= limits_.max_items && bytes_ + bytes <= limits_.max_bytes;
}

Result<Ok> Spool::put(SpoolItem item, std::string_view document) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_++;
  }
  const std::string b = base(seq);
  item.path = b + kDocSuffix;
  item.sink = sink_;
  const std::string meta = meta_json(item, document.size());
  const uint64_t bytes = document.size() + meta.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!make_room_locked(bytes, 1)) {
      ++stats_.dropped_write;
      return Error{Error::Kind::kIo, EFBIG,
                   "the item (" + std::to_string(bytes) +
                       " bytes) is larger than the spool's bound (" +
                       std::to_string(limits_.max_bytes) + " bytes)"};
    }
  }
  // Outside the lock: the delivery thread goes on meanwhile. The document
  // first; the .item makes the item exist.
  Result<Ok> written = write_file_atomic(item.path, document);
  if (written) written = write_file_atomic(b + kItemSuffix, meta);
  if (!written) {
    ::unlink(item.path.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped_write;
    return written.error();
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry e;
  e.seq = seq;
  e.bytes = bytes;
  e.item = std::move(item);
  bytes_ += bytes;
  entries_.push_back(std::move(e));
  ++stats_.accepted;
  wake_.notify_all();
  return Ok{};
}

int64_t Spool::jitter_ms(int64_t ceiling) {
  std::uniform_int_distribution<int64_t> pick(ceiling / 2, ceiling);
  return pick(rng_);
}

bool Spool::deliver_one(Sink& sink) {
  SpoolItem item;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [](const Entry& e) { return !e.in_flight && !e.other; });
    if (it == entries_.end()) return false;
    it->in_flight = true;
    item = it->item;
    seq = it->seq;
    stats_.call_since_ms = mono_ms();
  }
  const Delivery d = sink.deliver(item);  // may block: outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  stats_.call_since_ms = 0;
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.seq == seq; });
  if (it == entries_.end()) return true;  // cannot happen: in_flight entries are never dropped
  it->in_flight = false;
  const size_t i = static_cast<size_t>(it - entries_.begin());
  switch (d.status) {
    case DeliveryStatus::kDelivered:
      remove_entry_locked(i);
      ++stats_.delivered;
      stats_.last_delivered_ms = mono_ms();
      consecutive_failures_ = 0;
      next_attempt_ms_ = 0;
      stats_.last_error.clear();
      break;
    case DeliveryStatus::kReject:
      bytes_ -= std::min(bytes_, entries_[i].bytes);
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      set_aside_locked(seq, "rejected");  // its bytes counted there now
      changed_.notify_all();
      ++stats_.rejected;
      stats_.last_error = d.detail;
      break;
    case DeliveryStatus::kRetry: {
      ++stats_.failures;
      ++consecutive_failures_;
      stats_.last_error = d.detail;
      int64_t delay = jitter_ms(backoff_.ceiling_ms(consecutive_failures_));
      const int64_t now = mono_ms();
      if (flush_until_ms_ > now) delay = std::min<int64_t>(delay, 200);  // flushing: try again soon
      next_attempt_ms_ = now + delay;
      break;
    }
  }
  return true;
}

void Spool::start(Sink& sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this, &sink] { run(sink); });
}

void Spool::run(Sink& sink) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stop_) return;
        const bool any = std::any_of(entries_.begin(), entries_.end(),
                                     [](const Entry& e) { return !e.in_flight && !e.other; });
        const int64_t now = mono_ms();
        if (any && now >= next_attempt_ms_) break;
        if (any) {
          wake_.wait_for(lock, std::chrono::milliseconds(next_attempt_ms_ - now));
        } else {
          wake_.wait(lock);
        }
      }
    }
    deliver_one(sink);
    // The item's document, parsed profile and rows were just freed: given
    // back now, or the heap keeps the largest item's worth (agent/memory.h).
    release_free_memory();
  }
}

bool Spool::flush(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t deadline = mono_ms() + timeout_ms;
  flush_until_ms_ = deadline;
  next_attempt_ms_ = 0;
  wake_.notify_all();
  auto own = [&] {
    return std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.other; });
  };
  while (own()) {
    const int64_t now = mono_ms();
    if (now >= deadline) break;
    // A retry scheduled past the deadline is brought forward.
    if (next_attempt_ms_ > deadline) {
      next_attempt_ms_ = now;
      wake_.notify_all();
    }
    changed_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(deadline - now, 100)));
  }
  flush_until_ms_ = 0;
  return !own();
}

void Spool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SpoolStats Spool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SpoolStats s = stats_;
  for (const Entry& e : entries_) {
    (e.other ? s.others : s.pending) += 1;
    (e.other ? s.others_bytes : s.pending_bytes) += e.bytes;
  }
  s.set_aside = set_aside_.size();
  for (const SetAside& a : set_aside_) s.set_aside_bytes += a.bytes;
  return s;
}

std::string Spool::others_text() const {
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_sink;  // items, bytes
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (!e.other) continue;
      auto& [n, bytes] = per_sink[e.item.sink];
      ++n;
      bytes += e.bytes;
    }
  }
  std::string out;
  for (const auto& [sink, figures] : per_sink) {
    char size[48];
    std::snprintf(size, sizeof size, " (%.1f MB)", static_cast<double>(figures.second) / (1 << 20));
    out += (out.empty() ? "" : ", ") + std::to_string(figures.first) +
           (figures.first == 1 ? " item" : " items") + size + " for " +
           (sink.empty() ? "a sink not recorded (an older agent's)" : sink);
  }
  return out;
}

std::vector<SpoolItem> Spool::items() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SpoolItem> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.item);
  return out;
}

}  // namespace mlprof::agent
