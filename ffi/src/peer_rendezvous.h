// Host-side rendezvous of the peer exchange (target helix_exchange_peer).
//
// In one process the ranks of a cp group are devices whose handlers XLA runs on per-device threads
// (the same threads that meet in XLA's own collective rendezvous). Every call of the target
// publishes this rank's receive buffer (and, on GPU, its flag block) and waits until the group's
// other ranks reached the same call, so each rank can then store its rows straight into its
// peers' receive buffers.
//
// A call is keyed by (XLA run id, this rank's call count within the run): several executions of
// one program may be in flight at once on the CPU client, and a program may call the target many
// times (one per layer, or in a loop). A run's counters are dropped as soon as every rank has left
// every call of it, so memory stays bounded; a later call of the same run then restarts the count
// at 0 on every rank alike.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace helix_peer {

constexpr int kMaxRanks = 8;

struct Entry {
  void* recv = nullptr;   // this rank's receive buffer for the call [cp(src), T, Hc, W]
  void* flags = nullptr;  // GPU: this rank's flag block (exchange_cuda.cu); CPU: unused
  uint64_t gen = 0;       // GPU: this rank's call count in the group (all ranks must agree)
};

class Group {
 public:
  explicit Group(std::vector<int> ordinals) : ordinals_(std::move(ordinals)) {}

  int size() const { return static_cast<int>(ordinals_.size()); }
  const std::vector<int>& ordinals() const { return ordinals_; }

  // Publishes `mine` and waits until every rank published for the same call. On success fills
  // `all[0..cp)` and `key` (pass it to Finish / Leave). Returns "" or an error message.
  std::string Publish(int rank, int64_t run_id, const Entry& mine, double timeout_s, Entry* all,
                      std::pair<int64_t, uint64_t>* key) {
    std::unique_lock<std::mutex> lk(mu_);
    Run& run = runs_[run_id];
    const uint64_t call = run.next[rank]++;
    *key = {run_id, call};
    Slot& slot = slots_[*key];
    if (slot.arrived == 0) run.live++;
    slot.e[rank] = mine;
    slot.arrived++;
    cv_.notify_all();
    if (!cv_.wait_for(lk, Seconds(timeout_s), [&] { return slot.arrived == size(); })) {
      return Describe("waited " + std::to_string(timeout_s) + " s for the other ranks", rank, run_id, call,
                      slot.arrived);
    }
    for (int r = 0; r < size(); ++r) all[r] = slot.e[r];
    return "";
  }

  // CPU: waits until every rank finished storing into the others' buffers, then leaves the call.
  std::string Finish(int rank, std::pair<int64_t, uint64_t> key, double timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    Slot& slot = slots_[key];
    slot.finished++;
    cv_.notify_all();
    if (!cv_.wait_for(lk, Seconds(timeout_s), [&] { return slot.finished == size(); })) {
      return Describe("waited " + std::to_string(timeout_s) + " s for the other ranks' stores", rank, key.first,
                      key.second, slot.finished);
    }
    LeaveLocked(key);
    return "";
  }

  // GPU: the device kernel does the second barrier; the host only leaves the call.
  void Leave(std::pair<int64_t, uint64_t> key) {
    std::lock_guard<std::mutex> lk(mu_);
    LeaveLocked(key);
  }

 private:
  struct Slot {
    Entry e[kMaxRanks];
    int arrived = 0, finished = 0, left = 0;
  };
  struct Run {
    uint64_t next[kMaxRanks] = {};
    int live = 0;  // slots of this run not yet left by every rank
  };

  static std::chrono::duration<double> Seconds(double s) { return std::chrono::duration<double>(s); }

  void LeaveLocked(std::pair<int64_t, uint64_t> key) {
    auto it = slots_.find(key);
    if (it == slots_.end() || ++it->second.left < size()) return;
    slots_.erase(it);
    auto run = runs_.find(key.first);
    if (run == runs_.end() || --run->second.live > 0) return;
    for (int r = 1; r < size(); ++r)
      if (run->second.next[r] != run->second.next[0]) return;  // a rank is ahead: keep counting
    runs_.erase(run);
  }

  std::string Describe(const std::string& what, int rank, int64_t run_id, uint64_t call, int count) const {
    std::string g;
    for (size_t i = 0; i < ordinals_.size(); ++i) g += (i ? "," : "") + std::to_string(ordinals_[i]);
    return "helix_exchange_peer: rank " + std::to_string(rank) + " of the peer group of devices [" + g + "] " +
           what + " at call " + std::to_string(call) + " of run " + std::to_string(run_id) + " (" +
           std::to_string(count) + " of " + std::to_string(size()) +
           " there): every rank of the group must run the same program; a peer may have failed. "
           "Use transport='collective' to exchange through XLA's all-to-all instead.";
  }

  const std::vector<int> ordinals_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, uint64_t>, Slot> slots_;
  std::map<int64_t, Run> runs_;
};

// The group (row of `groups`, a [num_groups, cp] row-major table of device ordinals) that holds
// `ordinal`, created once per process and never freed; `rank` = its column. "" or an error.
inline std::string FindGroup(const int64_t* groups, int64_t n, int64_t cp, int ordinal, Group** out, int* rank) {
  if (cp < 1 || cp > kMaxRanks || n % cp != 0 || n == 0)
    return "helix_exchange_peer: groups must be a non-empty [num_groups, cp] table with 1 <= cp <= " +
           std::to_string(kMaxRanks) + ", got " + std::to_string(n) + " entries for cp=" + std::to_string(cp);
  for (int64_t row = 0; row < n / cp; ++row) {
    for (int64_t c = 0; c < cp; ++c) {
      if (groups[row * cp + c] != ordinal) continue;
      std::vector<int> key(groups + row * cp, groups + (row + 1) * cp);
      static std::mutex mu;
      static std::map<std::vector<int>, std::unique_ptr<Group>>* registry =
          new std::map<std::vector<int>, std::unique_ptr<Group>>();  // leaked: handlers may run at exit
      std::lock_guard<std::mutex> lk(mu);
      auto& g = (*registry)[key];
      if (!g) g = std::make_unique<Group>(key);
      *out = g.get();
      *rank = static_cast<int>(c);
      return "";
    }
  }
  return "helix_exchange_peer: device ordinal " + std::to_string(ordinal) +
         " is in none of the peer groups passed (groups must list the mesh's devices by local ordinal)";
}

}  // namespace helix_peer
