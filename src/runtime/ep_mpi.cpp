// Expert parallelism's transport: Open MPI point-to-point messages (compiled with STRATA_MPI).
#ifdef STRATA_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (no C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <fmt/format.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "model/forward.h"
#include "runtime/engine.h"
#include "runtime/expert_parallel.h"
#include "runtime/model_copy.h"

namespace strata {
namespace {

enum Tag : int { kTagHello = 1, kTagVerdict, kTagJob, kTagReply, kTagStop, kTagReport };
constexpr uint32_t kJobMagic = 0x4a505045;  // "EPPJ"
constexpr size_t kTailFloats = sizeof(EpReplyTail) / sizeof(float);  // an answer's counters after its rows

// One MoE layer's job for one rank; followed by tok[n_tok], pair_tok/slot/exp[n_pairs] (int32),
// pair_w[n_pairs] (f32) and rows[n_tok * n_embd] (f32).
struct JobHeader {
  uint32_t magic = kJobMagic;
  int32_t layer = 0, n = 0, n_tok = 0, n_pairs = 0, pad = 0;
};
static_assert(sizeof(JobHeader) == kEpJobHeaderBytes);

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  for (size_t b; (b = s.find('\n', a)) != std::string::npos; a = b + 1) v.push_back(s.substr(a, b - a));
  return v;
}

// The first difference between rank 0's table and another rank's, "" when none.
std::string first_difference(const std::vector<std::string>& mine, const std::vector<std::string>& theirs, int rank) {
  const std::string d = first_table_difference(mine, theirs, "rank 0", fmt::format("rank {}", rank));
  return d.empty() ? d : fmt::format("rank {} holds another model than rank 0: {}; every rank needs a copy of the same file", rank, d);
}

class MpiEp final : public ExpertParallel, public ExpertOffload {
 public:
  MpiEp(Engine& eng, const EpOptions& o) : eng_(eng), opt_(o), clock_(clock_s) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    d_ = eng.config().n_embd;
    live_.assign(static_cast<size_t>(size_), EpRankStats{});
  }
  ~MpiEp() override {
    if (rank_ != 0 || stopped_) return;
    if (in_flight_) die("expert parallelism: a pass failed on rank 0 while other ranks were computing; ending the job");
    try {
      stop();
    } catch (const std::exception& e) {
      die(e.what());
    }
  }

  int rank() const override { return rank_; }
  int ranks() const override { return size_; }
  const EpPlan& plan() const override { return plan_; }

  void handshake() {
    const std::vector<std::string> mine = tensor_table_lines(eng_.model().gguf());
    if (rank_ != 0) {
      const std::string s = join(mine);
      MPI_Send(s.data(), static_cast<int>(s.size()), MPI_BYTE, 0, kTagHello, MPI_COMM_WORLD);
      int ok = 0;
      MPI_Recv(&ok, 1, MPI_INT, 0, kTagVerdict, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      return;
    }
    for (int r = 1; r < size_; ++r) {
      MPI_Status st;
      int flag = 0;
      if (!poll_until([&] { return MPI_Iprobe(r, kTagHello, MPI_COMM_WORLD, &flag, &st) == MPI_SUCCESS && flag; }, clock_() + opt_.timeout_s, clock_))
        die(fmt::format("expert parallelism: rank {} did not report its model within {} s (--ep-timeout)", r, opt_.timeout_s));
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      std::string s(static_cast<size_t>(count), '\0');
      MPI_Recv(s.data(), count, MPI_BYTE, r, kTagHello, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const std::string diff = first_difference(mine, split(s), r);
      if (!diff.empty()) die("expert parallelism: " + diff);
    }
    for (int r = 1; r < size_; ++r) {
      int ok = 1;
      MPI_Send(&ok, 1, MPI_INT, r, kTagVerdict, MPI_COMM_WORLD);
    }
    make_plan();
  }

  // ---- rank 0: ExpertOffload ---------------------------------------------------------------
  void claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) override {
    if (size_ == 1 || layer >= plan_.n_layer) return;
    if (!lost_.empty()) throw Error(lost_);  // a rank stopped answering: no pass computes any more
    auto& st = c.st;
    const int n = c.b.n;
    if (layer == first_moe_) {
      decoding_ = n == 1;
      if (decoding_) ++report_.decode_tokens;
    }
    for (int r = 1; r < size_; ++r) peer_[r].pairs.clear();
    plan_.claim_remote(layer, c.cfg.layers[layer].n_expert, g.counts, g.starts, away, ExpertOffload::kAway,
                       [&](int o, int q) { peer_[o].pairs.push_back(q); });
    mark_.resize(static_cast<size_t>(n));
    for (int r = 1; r < size_; ++r) {
      Peer& p = peer_[r];
      if (p.pairs.empty()) continue;
      std::fill(mark_.begin(), mark_.end(), 0);
      for (int q : p.pairs) mark_[st.tok_of[q]] = 1;
      int n_tok = 0;
      for (int i = 0; i < n; ++i) n_tok += mark_[i];
      const int np = static_cast<int>(p.pairs.size()), k = c.cfg.layers[layer].n_expert_used;
      const size_t bytes = sizeof(JobHeader) + 4 * (static_cast<size_t>(n_tok) + 4 * np) + 4 * static_cast<size_t>(n_tok) * d_;
      p.out.resize(bytes);
      JobHeader h;
      h.layer = layer, h.n = n, h.n_tok = n_tok, h.n_pairs = np;
      uint8_t* w = p.out.data();
      std::memcpy(w, &h, sizeof h);
      auto* tok = reinterpret_cast<int32_t*>(w + sizeof h);
      int32_t *ptok = tok + n_tok, *pslot = ptok + np, *pexp = pslot + np;
      auto* pw = reinterpret_cast<float*>(pexp + np);
      float* rows = pw + np;
      for (int i = 0, t = 0; i < n; ++i)
        if (mark_[i]) {
          tok[t] = i;
          std::memcpy(rows + static_cast<size_t>(t) * d_, st.xn.data() + static_cast<size_t>(i) * d_, sizeof(float) * d_);
          ++t;
        }
      for (int j = 0; j < np; ++j) {
        const int q = p.pairs[j];
        ptok[j] = st.tok_of[q];
        pslot[j] = st.slot_of[q];
        pexp[j] = st.sel[static_cast<size_t>(st.tok_of[q]) * k + st.slot_of[q]];
        pw[j] = st.sel_w[static_cast<size_t>(st.tok_of[q]) * k + st.slot_of[q]];
      }
      p.in.resize(static_cast<size_t>(np) * d_ + kTailFloats);
      check(MPI_Irecv(p.in.data(), static_cast<int>(p.in.size() * sizeof(float)), MPI_BYTE, r, kTagReply, MPI_COMM_WORLD, &p.recv), r, "receive");
      check(MPI_Isend(p.out.data(), static_cast<int>(bytes), MPI_BYTE, r, kTagJob, MPI_COMM_WORLD, &p.send), r, "send");
      const uint64_t both = bytes + p.in.size() * sizeof(float);
      report_.net_bytes += both;
      ++report_.round_trips;
      ++root_.jobs;
      root_.pairs += static_cast<uint64_t>(np);
      if (decoding_) report_.decode_bytes += both, ++report_.decode_round_trips;
      in_flight_ = true;
    }
  }

  void finish(FwdCtx& c, int layer, const ExpertGroups&, const uint8_t*) override {
    if (!in_flight_) return;
    const double t0 = clock_();
    int pending = 0;
    const bool ok = poll_until(
        [&] {
          for (int r = 1; r < size_; ++r) {
            int a = 1, b = 1;
            check(MPI_Test(&peer_[r].send, &a, MPI_STATUS_IGNORE), r, "send");
            check(MPI_Test(&peer_[r].recv, &b, MPI_STATUS_IGNORE), r, "receive");
            if (!a || !b) return pending = r, false;
          }
          return true;
        },
        t0 + opt_.timeout_s, clock_);
    root_.net_wait_s += clock_() - t0;
    if (!ok) {
      const std::string why = fmt::format("expert parallelism: rank {} did not answer MoE layer {} within {} s (--ep-timeout)", pending, layer,
                                          opt_.timeout_s);
      if (!opt_.fail_passes) die(why + "; ending the job");
      lost_ = why;
      throw Error(why);
    }
    in_flight_ = false;
    auto& st = c.st;
    const int k = c.cfg.layers[layer].n_expert_used;
    std::lock_guard<std::mutex> lk(live_mu_);
    for (int r = 1; r < size_; ++r) {
      Peer& p = peer_[r];
      if (p.pairs.empty()) continue;
      for (size_t j = 0; j < p.pairs.size(); ++j) {
        const int q = p.pairs[j];
        std::memcpy(st.slots.data() + (static_cast<size_t>(st.tok_of[q]) * k + st.slot_of[q]) * d_, p.in.data() + j * d_, sizeof(float) * d_);
      }
      EpReplyTail t;
      std::memcpy(&t, p.in.data() + p.pairs.size() * d_, sizeof t);
      EpRankStats& x = live_[static_cast<size_t>(r)];
      x.hits = t.hits, x.misses = t.misses, x.bytes_read = t.bytes_read, x.jobs = t.jobs, x.pairs = t.pairs, x.compute_s = t.compute_s;
      p.pairs.clear();
    }
    EpRankStats& me = live_[0];
    me.jobs = root_.jobs, me.pairs = root_.pairs, me.net_wait_s = root_.net_wait_s;
    fill_tier(me);
  }

  std::vector<EpRankStats> live() const override {
    std::lock_guard<std::mutex> lk(live_mu_);
    return live_;
  }

  bool holds(int layer, int e) const override { return size_ > 1 && layer < plan_.n_layer && plan_.owner_of(layer, e) > 0; }

  // ---- other ranks ---------------------------------------------------------------------------
  int serve() override {
    try {
      return serve_loop();
    } catch (const std::exception& e) {
      die(fmt::format("expert parallelism: rank {}: {}", rank_, e.what()));
    }
  }

  std::string lost() const override { return lost_; }
  [[noreturn]] void abort_job(const std::string& why) override { die(why); }

  EpReport stop() override {
    if (stopped_) return report_;
    stopped_ = true;
    report_.ranks = size_;
    report_.per_rank.assign(static_cast<size_t>(size_), EpRankStats{});
    for (int r = 1; r < size_; ++r) check(MPI_Send(nullptr, 0, MPI_BYTE, r, kTagStop, MPI_COMM_WORLD), r, "send");
    for (int r = 1; r < size_; ++r) {
      MPI_Request req;
      EpRankStats& s = report_.per_rank[static_cast<size_t>(r)];
      check(MPI_Irecv(&s, sizeof s, MPI_BYTE, r, kTagReport, MPI_COMM_WORLD, &req), r, "receive");
      int done = 0;
      if (!poll_until([&] { return MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done; }, clock_() + opt_.timeout_s, clock_))
        die(fmt::format("expert parallelism: rank {} did not report within {} s (--ep-timeout)", r, opt_.timeout_s));
    }
    EpRankStats& me = report_.per_rank[0];
    me = root_;
    fill_tier(me);
    fill_memory(me);
    double layers = 0;
    for (double s : eng_.model().layer_seconds()) layers += s;
    me.compute_s = std::max(0.0, layers - me.net_wait_s - me.io_wait_s);
    std::vector<int> k_used;
    for (const auto& lc : eng_.config().layers) k_used.push_back(lc.n_expert_used);
    const EpFormula f = ep_formula(plan_, k_used, d_);
    report_.formula_bytes = f.bytes, report_.formula_round_trips = f.round_trips;
    if (plan_.by_traffic) {
      const EpFormula u = ep_formula(plan_, k_used, d_, /*usage=*/true);
      report_.usage_formula = true, report_.usage_bytes = u.bytes, report_.usage_round_trips = u.round_trips;
    }
    eng_.model().set_offload(nullptr);
    MPI_Finalize();
    return report_;
  }

 private:
  struct Peer {
    std::vector<int32_t> pairs;  // this layer's pairs on the rank: indices into st.tok_of / st.slot_of
    std::vector<uint8_t> out;    // the job message
    std::vector<float> in;       // the answer: one weighted row per pair
    MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
  };

  void check(int rc, int r, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    die(fmt::format("expert parallelism: {} to rank {} failed: {} (did the rank exit?)", what, r, std::string(msg, static_cast<size_t>(len))));
  }

  void fill_tier(EpRankStats& s) {
    const ExpertCacheCounters k = eng_.tier().counters();
    s.hits = k.hits, s.misses = k.misses, s.bytes_read = k.bytes_read, s.io_wait_s = k.wait_s;
  }
  void fill_memory(EpRankStats& s) {
    const MemoryPlan& m = eng_.tier().plan();
    s.budget = m.budget, s.dense = m.dense, s.kv = m.kv, s.scratch = m.scratch, s.expert_cache = m.expert_cache;
    s.peak_rss = process_peak_rss();
  }

  void make_plan() {
    plan_ = plan_for_model(eng_.model(), size_, opt_.replicate, eng_.options().tier.stats_dir);
    first_moe_ = plan_.n_layer;
    for (int l = plan_.n_layer - 1; l >= 0; --l)
      if (plan_.owner_of(l, 0) >= 0) first_moe_ = l;
    peer_.resize(static_cast<size_t>(size_));
    if (size_ > 1) eng_.model().set_offload(this);
  }

  int serve_loop() {
    char fault_kind = 0;
    int fault_rank = -1, fault_after = 0;
    if (const char* f = std::getenv("STRATA_EP_FAULT"))  // tests: "exit:RANK:JOBS" or "stall:RANK:JOBS"
      if (std::sscanf(f, "%*[a-z]:%d:%d", &fault_rank, &fault_after) == 2) fault_kind = f[0];
    EpRankStats me;
    int k_max = 1;
    for (const auto& lc : eng_.config().layers) k_max = std::max(k_max, lc.n_expert_used);
    const EpShardBuffers planned = ep_shard_buffers(eng_.options().n_batch, k_max, d_);  // in the memory plan
    std::vector<uint8_t> in;
    std::vector<float> out;
    in.reserve(planned.job_bytes);
    out.reserve(planned.reply_bytes / sizeof(float));
    for (;;) {
      MPI_Message msg;
      MPI_Status st;
      int flag = 0;
      poll_until([&] { return MPI_Improbe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st) == MPI_SUCCESS && flag; }, INFINITY, clock_);
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      in.resize(static_cast<size_t>(std::max(count, 1)));
      MPI_Mrecv(in.data(), count, MPI_BYTE, &msg, &st);
      if (st.MPI_TAG == kTagStop) {
        fill_tier(me);
        fill_memory(me);
        MPI_Send(&me, sizeof me, MPI_BYTE, 0, kTagReport, MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
      }
      STRATA_CHECK(st.MPI_TAG == kTagJob && count >= static_cast<int>(sizeof(JobHeader)), "unexpected message (tag {}, {} bytes)", st.MPI_TAG, count);
      JobHeader h;
      std::memcpy(&h, in.data(), sizeof h);
      const size_t want = sizeof h + 4 * (static_cast<size_t>(h.n_tok) + 4 * static_cast<size_t>(h.n_pairs)) + 4 * static_cast<size_t>(h.n_tok) * d_;
      STRATA_CHECK(h.magic == kJobMagic && h.n_tok >= 0 && h.n_pairs >= 0 && want == static_cast<size_t>(count),
                   "malformed job ({} bytes; layer {}, {} rows, {} pairs)", count, h.layer, h.n_tok, h.n_pairs);
      RoutedJob j;
      j.layer = h.layer, j.n = h.n, j.n_tok = h.n_tok, j.n_pairs = h.n_pairs;
      j.tok = reinterpret_cast<const int32_t*>(in.data() + sizeof h);
      j.pair_tok = j.tok + h.n_tok;
      j.pair_slot = j.pair_tok + h.n_pairs;
      j.pair_exp = j.pair_slot + h.n_pairs;
      j.pair_w = reinterpret_cast<const float*>(j.pair_exp + h.n_pairs);
      j.rows = j.pair_w + h.n_pairs;
      out.resize(static_cast<size_t>(h.n_pairs) * d_ + kTailFloats);
      const double t0 = clock_();
      eng_.model().run_routed(j, eng_.kv(), out.data());
      me.compute_s += clock_() - t0;
      ++me.jobs;
      me.pairs += static_cast<uint64_t>(h.n_pairs);
      fill_tier(me);
      const EpReplyTail tail{me.hits, me.misses, me.bytes_read, me.jobs, me.pairs, me.compute_s};
      std::memcpy(out.data() + static_cast<size_t>(h.n_pairs) * d_, &tail, sizeof tail);
      if (fault_kind && fault_rank == rank_ && me.jobs >= static_cast<uint64_t>(fault_after)) {
        std::fprintf(stderr, "rank %d: injected fault (%s)\n", rank_, std::getenv("STRATA_EP_FAULT"));
        if (fault_kind == 'e') std::_Exit(3);
        for (;;) pause();
      }
      const int rc = MPI_Send(out.data(), static_cast<int>(out.size() * sizeof(float)), MPI_BYTE, 0, kTagReply, MPI_COMM_WORLD);
      STRATA_CHECK(rc == MPI_SUCCESS, "sending an answer to rank 0 failed");
    }
  }

  Engine& eng_;
  EpOptions opt_;
  std::string lost_;  // fail_passes: why passes fail now ("": they run)
  std::function<double()> clock_;
  int rank_ = 0, size_ = 1, d_ = 0, first_moe_ = 0;
  EpPlan plan_;
  std::vector<Peer> peer_;
  std::vector<uint8_t> mark_;
  EpRankStats root_;
  mutable std::mutex live_mu_;
  std::vector<EpRankStats> live_;  // [ranks] under live_mu_ (ExpertParallel::live)
  EpReport report_;
  bool in_flight_ = false, decoding_ = false, stopped_ = false;
};

}  // namespace

bool expert_parallel_available() { return true; }

int expert_parallel_rank() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // Serialized: the server's scheduler thread runs the passes, the main thread starts and stops.
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    STRATA_CHECK(provided >= MPI_THREAD_SERIALIZED, "expert parallelism: this MPI library offers no MPI_THREAD_SERIALIZED ({})", provided);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::unique_ptr<ExpertParallel> ExpertParallel::start(Engine& eng, const EpOptions& o) {
  expert_parallel_rank();  // joins the job
  auto ep = std::make_unique<MpiEp>(eng, o);
  ep->handshake();
  return ep;
}

}  // namespace strata
#endif
