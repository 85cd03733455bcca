#include "ipc/segment.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "base/check.h"

namespace kvasir::ipc {
namespace bip = boost::interprocess;

namespace {

uint64_t align_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Whether the owner recorded in a segment header still runs. kill(pid, 0)
// alone is not enough: a zombie passes it (a SIGKILLed daemon whose parent
// has not reaped it yet), and so does an unrelated process that got the dead
// owner's pid. `start` is the owner's start time as recorded (0: unknown, as
// in a header of another version or where /proc could not say).
bool owner_alive(int32_t pid, uint64_t start) {
  if (pid <= 0) return false;
  if (const uint64_t now = process_start_time(pid); now != 0) return start == 0 || now == start;
  // No such process, a zombie, or no /proc: only the last is unsure.
  struct stat st {};
  if (::stat("/proc/self/stat", &st) == 0) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

std::unique_ptr<bip::mapped_region> map_object(bip::shared_memory_object& shm) {
  return std::make_unique<bip::mapped_region>(shm, bip::read_write);
}

}  // namespace

uint64_t process_start_time(int32_t pid) {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Field 2 (comm) may hold spaces and parentheses: fields count from the
  // last ')'. After it: state(3), then 18 numbers up to starttime(22).
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  char state = 0;
  unsigned long long v[19] = {};
  const int got = std::sscanf(
      p + 1,
      " %c %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
      "%llu %llu %llu",
      &state, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11],
      &v[12], &v[13], &v[14], &v[15], &v[16], &v[17], &v[18]);
  if (got != 20 || state == 'Z' || state == 'X' || state == 'x') return 0;
  return uint64_t(v[18]) + 1;  // +1: a process started at tick 0 is still not "unknown"
}

// ---- the stages' kernels text (a seqlock of its own; the stage writes) ------

void write_stage_simd(StageShared& st, std::string_view text) {
  char bytes[kStageSimdBytes] = {};
  std::memcpy(bytes, text.data(), std::min(text.size(), kStageSimdBytes - 1));
  // Odd while writing; from an odd value too (a writer that died inside).
  const uint32_t seq = st.simd_seq.load(std::memory_order_relaxed) | 1u;
  st.simd_seq.store(seq, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t w = 0; w < kStageSimdBytes / 8; ++w) {
    uint64_t word;
    std::memcpy(&word, bytes + w * 8, 8);
    st.simd_text[w].store(word, std::memory_order_relaxed);
  }
  st.simd_seq.store(seq + 1, std::memory_order_release);
}

std::string read_stage_simd(const StageShared& st) {
  char bytes[kStageSimdBytes];
  bool consistent = false;
  for (int attempt = 0; attempt < 10000 && !consistent; ++attempt) {
    const uint32_t s1 = st.simd_seq.load(std::memory_order_acquire);
    if (s1 & 1u) continue;
    for (size_t w = 0; w < kStageSimdBytes / 8; ++w) {
      const uint64_t word = st.simd_text[w].load(std::memory_order_relaxed);
      std::memcpy(bytes + w * 8, &word, 8);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    consistent = st.simd_seq.load(std::memory_order_relaxed) == s1;
  }
  if (!consistent) return {};
  std::string text(bytes, strnlen(bytes, kStageSimdBytes - 1));
  for (char& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return text;
}

// ---- the stages' expert load (the stage writes, anyone reads) ----------------

namespace {
// The most experts a model may have (model/config.h, kMaxExperts); a count
// past it in the segment is another process's bad write, read as none.
constexpr int32_t kMaxExpertsCounted = 1024;
}  // namespace

void set_stage_experts(StageShared& st, int32_t n_experts) {
  KV_CHECK(n_experts >= 0 && n_experts <= kMaxExpertsCounted, "{} experts: 0..{} are shown",
           n_experts, kMaxExpertsCounted);
  st.n_experts.store(n_experts, std::memory_order_release);
}

void add_stage_routed(StageShared& st, std::span<const uint64_t> per_expert) {
  if (per_expert.empty()) return;
  const int32_t n = st.n_experts.load(std::memory_order_relaxed);
  KV_CHECK(int64_t(per_expert.size()) == int64_t(n), "{} expert counts for {} experts",
           per_expert.size(), n);
  const int32_t per = experts_per_slot(n);
  uint64_t slots[kMaxExpertsShown] = {};
  for (size_t e = 0; e < per_expert.size(); ++e) slots[e / size_t(per)] += per_expert[e];
  for (int32_t i = 0; i < expert_slots(n); ++i)
    if (slots[i]) st.routed[i].fetch_add(slots[i], std::memory_order_relaxed);
}

ExpertLoad read_stage_experts(const StageShared& st) {
  ExpertLoad l;
  const int32_t n = st.n_experts.load(std::memory_order_acquire);
  if (n <= 0 || n > kMaxExpertsCounted) return l;
  l.n_experts = n;
  l.per_slot = experts_per_slot(n);
  l.routed.resize(size_t(expert_slots(n)));
  for (size_t i = 0; i < l.routed.size(); ++i)
    l.routed[i] = st.routed[i].load(std::memory_order_relaxed);
  return l;
}

// ---- the stages' accounting (a seqlock per stage; the stage writes) ----------

namespace {
std::atomic<uint64_t>* phase_counter(StageShared& st, uint32_t phase) {
  switch (phase) {
    case kPhaseBusy:
      return &st.stats.busy_ns;
    case kPhaseBlocked:
      return &st.stats.blocked_ns;
    default:
      return &st.stats.starved_ns;
  }
}
// The writer's bracket: odd while the fields change.
void write_begin(StageShared& st) {
  st.acct_seq.store(st.acct_seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
void write_end(StageShared& st) {
  st.acct_seq.store(st.acct_seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}
}  // namespace

void begin_accounting(StageShared& st, int64_t now) {
  write_begin(st);
  st.phase.store(kPhaseIdle, std::memory_order_relaxed);
  st.phase_since_ns.store(now, std::memory_order_relaxed);
  write_end(st);
}

void enter_phase(StageShared& st, StagePhase p, int64_t now) {
  write_begin(st);
  const int64_t since = st.phase_since_ns.load(std::memory_order_relaxed);
  if (since > 0 && now > since)
    phase_counter(st, st.phase.load(std::memory_order_relaxed))
        ->fetch_add(uint64_t(now - since), std::memory_order_relaxed);
  st.phase.store(p, std::memory_order_relaxed);
  if (since > 0) st.phase_since_ns.store(now, std::memory_order_relaxed);
  write_end(st);
}

void end_accounting(StageShared& st) {
  // The writer is gone: a write it left half done (odd) is closed, and the
  // running part it never booked is dropped (the stage is not serving).
  uint32_t seq = st.acct_seq.load(std::memory_order_relaxed);
  st.acct_seq.store(seq | 1u, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  st.phase.store(kPhaseIdle, std::memory_order_relaxed);
  st.phase_since_ns.store(0, std::memory_order_relaxed);
  st.acct_seq.store((seq | 1u) + 1, std::memory_order_release);
}

StageTime read_stage_time(const StageShared& st, int64_t now) {
  StageTime t;
  int64_t since = 0;
  auto copy = [&] {
    t.busy_ns = st.stats.busy_ns.load(std::memory_order_relaxed);
    t.starved_ns = st.stats.starved_ns.load(std::memory_order_relaxed);
    t.blocked_ns = st.stats.blocked_ns.load(std::memory_order_relaxed);
    t.phase = StagePhase(st.phase.load(std::memory_order_relaxed));
    since = st.phase_since_ns.load(std::memory_order_relaxed);
  };
  // A writer holds the bracket for a few instructions: a reader retries,
  // spinning, then yielding (a writer descheduled inside its bracket on a
  // busy machine holds it for a time slice). Past 200 ms (only a writer
  // that died inside it, which end_accounting then closes) it takes the
  // fields as they are.
  bool consistent = false;
  const bool clock = now <= 0;
  int64_t give_up = 0;
  for (int attempt = 0; !consistent; ++attempt) {
    if (attempt >= 1000) {
      const int64_t t = now_ns();
      if (give_up == 0) give_up = t + 200'000'000;
      if (t > give_up) break;
      sched_yield();
    }
    const uint32_t s1 = st.acct_seq.load(std::memory_order_acquire);
    if (s1 & 1u) continue;
    copy();
    // Read after the copy, the clock is past every change it holds.
    if (clock) now = now_ns();
    std::atomic_thread_fence(std::memory_order_acquire);
    consistent = st.acct_seq.load(std::memory_order_relaxed) == s1;
  }
  if (!consistent) {
    copy();
    if (clock) now = now_ns();
  }
  // A caller's instant taken before a change the copy holds: count up to
  // the change (never a negative running part, never a moment twice).
  now = std::max(now, since);
  t.now_ns = now;
  t.serving = since > 0;
  t.in_phase_ns = t.serving ? std::max<int64_t>(now - since, 0) : 0;
  switch (t.phase) {
    case kPhaseBusy:
      t.busy_ns += uint64_t(t.in_phase_ns);
      break;
    case kPhaseBlocked:
      t.blocked_ns += uint64_t(t.in_phase_ns);
      break;
    default:
      t.starved_ns += uint64_t(t.in_phase_ns);
  }
  return t;
}

// ---- the segment ------------------------------------------------------------

std::string Segment::name_for(const std::string& key) {
  // FNV-1a 64: stable across runs and builds (std::hash is not promised to be).
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return fmt::format("kvasir-{:016x}", h);
}

std::string Segment::check_params(const SegmentParams& p) {
  const SlotDims& d = p.dims;
  if (p.n_stages < 2 || p.n_stages > kMaxStages)
    return fmt::format("{} stages (2..{})", p.n_stages, kMaxStages);
  if (d.inflight < 1 || d.inflight > kMaxInflight)
    return fmt::format("max_inflight {} (1..{})", d.inflight, kMaxInflight);
  if (d.max_rows < 1 || d.max_rows > (1 << 16)) return fmt::format("max_rows {}", d.max_rows);
  if (d.max_tokens < d.max_rows || d.max_tokens > (1 << 20))
    return fmt::format("max_tokens {}", d.max_tokens);
  if (d.max_table < 1 || d.max_table > (1 << 20)) return fmt::format("max_table {}", d.max_table);
  if (d.tables != 1 && d.tables != 2) return fmt::format("{} tables a row", d.tables);
  if (d.hidden < 1 || d.hidden > (1 << 17)) return fmt::format("hidden {}", d.hidden);
  if (p.block_size < 1 || p.block_size > 4096) return fmt::format("block_size {}", p.block_size);
  if (!(p.kv_gpu_util > 0 && p.kv_gpu_util <= 1)) return fmt::format("kv_gpu_util {}", p.kv_gpu_util);
  if ((p.cuda_graphs != 0 && p.cuda_graphs != 1) || (p.cuda_quantize != 0 && p.cuda_quantize != 1))
    return fmt::format("cuda graphs {} / quantize {}", p.cuda_graphs, p.cuda_quantize);
  if (std::memchr(p.model_path, 0, sizeof p.model_path) == nullptr) return "model path not terminated";
  if (p.grammar_entries < 0 || p.grammar_entries > (1 << 16) || p.grammar_capacity > (64u << 20) ||
      (p.grammar_entries > 0 && p.grammar_capacity == 0))
    return fmt::format("grammar table {} x {} bytes", p.grammar_entries, p.grammar_capacity);
  if (p.grammar_workers < 1 || p.grammar_workers > 64 || p.grammar_cache < 0 ||
      p.grammar_cache > (1 << 20) || p.grammar_compile_timeout_ms < 1 ||
      p.grammar_compile_timeout_ms > 600000)
    return fmt::format("grammar compiler {} workers, {} kept, {} ms", p.grammar_workers,
                       p.grammar_cache, p.grammar_compile_timeout_ms);
  if (p.forced_drafts < 0 || p.forced_drafts > kMaxForced)
    return fmt::format("forced drafts {}", p.forced_drafts);
  if (p.spin_ns < 0 || p.spin_ns > 100'000'000) return fmt::format("spin {} ns", p.spin_ns);
  auto bad_plan = [](const StagePlan& s) {
    return s.first < 0 || s.first > s.last || s.threads < 1 || s.threads > 1024 ||
           std::memchr(s.device, 0, sizeof s.device) == nullptr || s.experts_first < -1 ||
           s.experts_first > s.experts_last || (s.experts_first < 0 && s.experts_last != -1) ||
           s.experts_last >= (1 << 10) || std::memchr(s.cpus, 0, sizeof s.cpus) == nullptr ||
           s.host < 0 || s.host >= kMaxStages;
  };
  for (int i = 0; i < p.n_stages; ++i)
    if (bad_plan(p.stages[i])) return fmt::format("stage {} plan", i);
  return check_members(p, bad_plan);
}

std::string Segment::check_members(const SegmentParams& p, bool (*bad_plan)(const StagePlan&)) {
  if (p.n_members < 0 || p.n_members > kMaxStages - p.n_stages)
    return fmt::format("{} members for {} stages (at most {} processes)", p.n_members, p.n_stages,
                       kMaxStages);
  if (p.n_members > 0 && (p.moe_top_k < 1 || p.moe_top_k > 256))
    return fmt::format("experts per token {}", p.moe_top_k);
  for (int m = 0; m < p.n_members; ++m) {
    const MemberPlan& mp = p.members[m];
    if (mp.position < 0 || mp.position >= p.n_stages || mp.index < 1 || bad_plan(mp.plan) ||
        mp.plan.experts_first < 0)
      return fmt::format("member {} plan", m);
    const StagePlan& lead = p.stages[mp.position];
    if (lead.experts_first != 0 || lead.first != mp.plan.first || lead.last != mp.plan.last ||
        lead.host != mp.plan.host)
      return fmt::format("member {}: not of its leader's group (stage {})", m, mp.position);
  }
  return {};
}

Segment::Layout Segment::layout(const SegmentParams& p) {
  Layout l{};
  const SlotDims& d = p.dims;
  l.stages = align_to(sizeof(SegmentHeader), 4096);
  l.rings = align_to(l.stages + sizeof(StageShared) * uint64_t(p.n_stages + p.n_members), 4096);
  l.desc = align_to(l.rings + sizeof(Ring) * uint64_t(p.n_stages + 1), 4096);
  l.desc_stride = align_to(desc_bytes(d), 4096);
  l.result = l.desc + l.desc_stride * uint64_t(d.inflight);
  l.result_stride = align_to(result_bytes(d), 4096);
  l.bound = align_to(l.result + l.result_stride * uint64_t(d.inflight), 4096);
  l.bound_stride = align_to(4ull * uint64_t(d.max_tokens) * uint64_t(d.hidden), 4096);
  l.cuda = l.bound + l.bound_stride * uint64_t(d.inflight) * uint64_t(p.n_stages - 1);
  l.grammar = align_to(l.cuda + cuda_table_bytes(p.n_stages - 1, d.inflight), 4096);
  // The members' areas: the control block, x, ids, y (each 64-aligned).
  l.members =
      align_to(l.grammar + GrammarTable::bytes_for(p.grammar_entries, p.grammar_capacity), 4096);
  const uint64_t rows = uint64_t(d.max_tokens), k = uint64_t(std::max(p.moe_top_k, 0));
  l.member_x = align_to(sizeof(MemberCall), 64);
  l.member_ids = align_to(l.member_x + 4 * rows * uint64_t(d.hidden), 64);
  l.member_y = align_to(l.member_ids + 4 * rows * k, 64);
  l.member_stride = align_to(l.member_y + 4 * rows * k * uint64_t(d.hidden), 4096);
  l.total = l.members + l.member_stride * uint64_t(p.n_members);
  return l;
}

std::unique_ptr<Segment> Segment::create(const std::string& name, const SegmentParams& params) {
  auto why = check_params(params);
  KV_CHECK(why.empty(), "segment {}: bad plan: {}", name, why);
  const Layout lay = layout(params);
  bip::permissions perm;
  perm.set_permissions(0600);
  std::unique_ptr<bip::shared_memory_object> shm;
  for (int attempt = 0; !shm; ++attempt) {
    try {
      shm = std::make_unique<bip::shared_memory_object>(bip::create_only, name.c_str(),
                                                        bip::read_write, perm);
      break;
    } catch (const bip::interprocess_exception& e) {
      KV_CHECK(e.get_error_code() == bip::already_exists_error && attempt < 3,
               "segment {}: cannot create: {}", name, e.what());
    }
    // It exists: live instance, or leftovers of a killed one?
    int32_t owner = 0;
    uint64_t owner_start = 0;
    for (int look = 0; look < 5; ++look) {
      try {
        bip::shared_memory_object old(bip::open_only, name.c_str(), bip::read_only);
        bip::offset_t size = 0;
        old.get_size(size);
        if (uint64_t(size) >= sizeof(SegmentHeader)) {
          bip::mapped_region r(old, bip::read_only, 0, sizeof(SegmentHeader));
          auto* h = static_cast<const SegmentHeader*>(r.get_address());
          owner = h->owner_pid.load();
          // Only a header of this version has owner_start where we look.
          owner_start = h->version == kSegVersion ? h->owner_start.load() : 0;
          if (h->magic == kSegMagic) break;
        }
      } catch (const bip::interprocess_exception&) {
        owner = 0;
        break;  // vanished meanwhile: just retry creating
      }
      // Being created right now by someone else? Give them a moment.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    KV_CHECK(!owner_alive(owner, owner_start),
             "kvasird is already running for this instance (pid {}, segment /dev/shm/{})", owner,
             name);
    bip::shared_memory_object::remove(name.c_str());  // stale: reclaim
  }
  shm->truncate(bip::offset_t(lay.total));
  std::unique_ptr<Segment> s(new Segment);
  s->region_ = map_object(*shm);
  s->name_ = name;
  s->base_ = s->region_->get_address();
  s->size_ = s->region_->get_size();
  KV_CHECK(s->size_ >= lay.total, "segment {}: mapped {} bytes, need {}", name, s->size_, lay.total);
  s->params_ = params;
  s->lay_ = lay;
  auto* base = static_cast<char*>(s->base_);
  s->hdr_ = new (base) SegmentHeader();
  s->hdr_->version = kSegVersion;
  s->hdr_->msg_version = kMsgVersion;
  s->hdr_->total_size = lay.total;
  s->hdr_->params = params;
  for (int i = 0; i < params.n_stages + params.n_members; ++i)
    new (base + lay.stages + i * sizeof(StageShared)) StageShared();
  for (int m = 0; m < params.n_members; ++m)
    new (base + lay.members + uint64_t(m) * lay.member_stride) MemberCall();
  for (int i = 0; i <= params.n_stages; ++i) {
    auto* r = new (base + lay.rings + i * sizeof(Ring)) Ring();
    r->init(uint32_t(params.dims.inflight));
  }
  s->cuda_ = CudaBoundaryTable::create(base + lay.cuda, lay.total - lay.cuda, params.n_stages - 1,
                                       params.dims.inflight);
  s->hdr_->owner_pid.store(getpid());
  s->hdr_->owner_start.store(process_start_time(getpid()));
  std::atomic_thread_fence(std::memory_order_release);
  s->hdr_->magic = kSegMagic;
  return s;
}

std::unique_ptr<Segment> Segment::open(const std::string& name) {
  std::unique_ptr<bip::shared_memory_object> shm;
  try {
    shm = std::make_unique<bip::shared_memory_object>(bip::open_only, name.c_str(),
                                                      bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    KV_FAIL("segment {}: cannot open: {}", name, e.what());
  }
  bip::offset_t size = 0;
  shm->get_size(size);
  KV_CHECK(uint64_t(size) >= sizeof(SegmentHeader), "segment {}: {} bytes, too small", name,
           size);
  std::unique_ptr<Segment> s(new Segment);
  s->region_ = map_object(*shm);
  s->name_ = name;
  s->base_ = s->region_->get_address();
  s->size_ = s->region_->get_size();
  s->hdr_ = static_cast<SegmentHeader*>(s->base_);
  std::atomic_thread_fence(std::memory_order_acquire);
  KV_CHECK(s->hdr_->magic == kSegMagic && s->hdr_->version == kSegVersion,
           "segment {}: not a Kvasir segment of version {} (magic {:#x}, version {})", name,
           kSegVersion, s->hdr_->magic, s->hdr_->version);
  KV_CHECK(s->hdr_->msg_version == kMsgVersion,
           "segment {}: its daemon sends ring messages of version {}, this process reads version "
           "{} (the daemon and its stages come from different builds)",
           name, s->hdr_->msg_version, kMsgVersion);
  std::memcpy(static_cast<void*>(&s->params_), &s->hdr_->params, sizeof(SegmentParams));
  auto why = check_params(s->params_);
  KV_CHECK(why.empty(), "segment {}: bad plan in header: {}", name, why);
  s->lay_ = layout(s->params_);
  KV_CHECK(s->lay_.total <= s->size_, "segment {}: {} bytes, the plan needs {}", name, s->size_,
           s->lay_.total);
  auto* base = static_cast<char*>(s->base_);
  why = CudaBoundaryTable::open(base + s->lay_.cuda, s->lay_.total - s->lay_.cuda,
                                s->params_.n_stages - 1, s->params_.dims.inflight, s->cuda_);
  KV_CHECK(why.empty(), "segment {}: CUDA boundary table: {}", name, why);
  return s;
}

void Segment::remove(const std::string& name) { bip::shared_memory_object::remove(name.c_str()); }

bool Segment::exists(const std::string& name) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_only);
    return true;
  } catch (const bip::interprocess_exception&) {
    return false;
  }
}

Segment::~Segment() = default;  // region_ unmaps

void Segment::request_shutdown() {
  hdr_->shutdown.store(1, std::memory_order_release);
  hdr_->state.ring();
  for (int i = 0; i <= n_stages(); ++i) {
    ring(i).not_empty.ring();
    ring(i).not_full.ring();
  }
  for (int m = 0; m < n_members(); ++m) {
    member_area(m).call->request.ring();
    member_area(m).call->answer.ring();
  }
}

bool Segment::drained() {
  const int S = n_stages();
  for (int i = 0; i <= S; ++i) {
    Ring& r = ring(i);
    const uint32_t head = r.head.load(std::memory_order_acquire);
    const uint32_t tail = r.tail.load(std::memory_order_acquire);
    if (head != tail) return false;  // queued
    if (i < S && stage(i).passed.load(std::memory_order_acquire) != tail) return false;  // held
  }
  return true;
}

StageShared& Segment::stage(int i) {
  KV_CHECK(i >= 0 && i < n_stages(), "stage {} out of range", i);
  return *reinterpret_cast<StageShared*>(static_cast<char*>(base_) + lay_.stages +
                                         uint64_t(i) * sizeof(StageShared));
}

StageShared& Segment::member(int m) {
  KV_CHECK(m >= 0 && m < n_members(), "member {} out of range", m);
  return *reinterpret_cast<StageShared*>(static_cast<char*>(base_) + lay_.stages +
                                         uint64_t(n_stages() + m) * sizeof(StageShared));
}

MemberArea Segment::member_area(int m) {
  KV_CHECK(m >= 0 && m < n_members(), "member {} out of range", m);
  char* a = static_cast<char*>(base_) + lay_.members + uint64_t(m) * lay_.member_stride;
  return MemberArea{reinterpret_cast<MemberCall*>(a), reinterpret_cast<float*>(a + lay_.member_x),
                    reinterpret_cast<int32_t*>(a + lay_.member_ids),
                    reinterpret_cast<float*>(a + lay_.member_y)};
}

Ring& Segment::ring(int i) {
  KV_CHECK(i >= 0 && i <= n_stages(), "ring {} out of range", i);
  return *reinterpret_cast<Ring*>(static_cast<char*>(base_) + lay_.rings +
                                  uint64_t(i) * sizeof(Ring));
}

DescView Segment::desc(uint32_t slot) {
  KV_CHECK(slot < uint32_t(dims().inflight), "slot {} out of range", slot);
  return desc_view(static_cast<char*>(base_) + lay_.desc + slot * lay_.desc_stride, dims());
}

ResultView Segment::result(uint32_t slot) {
  KV_CHECK(slot < uint32_t(dims().inflight), "slot {} out of range", slot);
  return result_view(static_cast<char*>(base_) + lay_.result + slot * lay_.result_stride, dims());
}

GrammarTable Segment::grammar_table() {
  return GrammarTable(static_cast<char*>(base_) + lay_.grammar, params_.grammar_entries,
                      params_.grammar_capacity);
}

float* Segment::boundary(uint32_t slot, int link) {
  KV_CHECK(slot < uint32_t(dims().inflight) && link >= 0 && link < n_stages() - 1,
           "boundary {}/{} out of range", slot, link);
  return reinterpret_cast<float*>(
      static_cast<char*>(base_) + lay_.bound +
      (uint64_t(slot) * uint64_t(n_stages() - 1) + uint64_t(link)) * lay_.bound_stride);
}

}  // namespace kvasir::ipc
