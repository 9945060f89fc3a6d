#include "distributed.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// NCCL where CUDA is built and nccl.h is on the include path (the nvidia-nccl wheel's
// include/ directory); compiled there, never run so far (docs/train.md#data-parallel). Not in
// the CPU-only module (MLTOOL_WITHOUT_NCCL: apps/CMakeLists.txt), which loads no libtorch_cuda.
#if defined(MLTOOL_HAVE_CUDA) && !defined(MLTOOL_WITHOUT_NCCL) && __has_include(<nccl.h>)
#define MLTOOL_HAVE_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include <torch/csrc/autograd/function_hook.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "mltool/train/batches.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::train {
namespace {

constexpr const char* kRank0Key = "mltool/rank0/";

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master == "127.0.0.1" || master == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Rank 0's store socket, listening on MASTER_ADDR's address only (127.0.0.1 for --nproc), so
// the store — which has no authentication — is not reachable on every interface, as LibTorch's
// own listener would be. -1 when MASTER_ADDR is not an address of this machine (LibTorch then
// listens as it does, on every interface: a trusted network is needed, docs/scaling-out.md).
int listen_on_master(const std::string& master, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    log::warn("data parallel: MASTER_ADDR " + master +
              " is not an address of this machine; the rendezvous store listens on every "
              "interface (it has no authentication: use a trusted network)");
  return fd;
}

}  // namespace

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
  std::string where;    // "rank R of W"
  int rank0_calls = 0;  // on_rank0: each call's outcome under its own store key

  // A collective that failed (a rank died, or waited past --dist-timeout) as a ResourceError.
  template <typename F>
  void collective(const std::string& what, F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      fail(what, e.what_without_backtrace());
    } catch (const std::exception& e) {  // gloo's own (a peer's connection reset, a timeout)
      fail(what, e.what());
    }
  }
  [[noreturn]] void fail(const std::string& what, const std::string& why) const {
    throw ResourceError("data parallel, " + where + ": " + what +
                        " failed (did another rank fail or exit? see also --dist-timeout): " + why);
  }
};

DataParallel::DataParallel(const TrainJob& job, const torch::Device& device)
    : impl_(std::make_unique<Impl>()), rank_(job.rank), world_(job.world_size) {
  impl_->where = "rank " + std::to_string(rank_) + " of " + std::to_string(world_);
  const std::chrono::milliseconds timeout(std::int64_t{job.dist_timeout} * 1000);
  const std::string at = job.master_addr + ":" + std::to_string(job.master_port);
  impl_->collective("the rendezvous at " + at, [&] {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(job.master_port);
    o.isServer = rank_ == 0;
    if (o.isServer)
      if (const int fd = listen_on_master(job.master_addr, job.master_port); fd >= 0)
        o.masterListenFd = fd;
    o.numWorkers = static_cast<std::size_t>(world_);
    o.waitWorkers = true;
    o.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(job.master_addr, o);
  });
  impl_->collective("creating the process group", [&] {
#ifdef MLTOOL_HAVE_NCCL
    if (device.is_cuda()) {  // NCCL: built, but not tested here (docs/train.md)
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, rank_, world_, opts);
      return;
    }
#endif
    if (device.is_cuda())
      throw ResourceError("data parallel on CUDA needs mltool built with CUDA and NCCL (nccl.h)");
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(gloo_device(job.master_addr));
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank_, world_, opts);
  });
}

DataParallel::~DataParallel() = default;

void DataParallel::broadcast(const std::vector<torch::Tensor>& tensors) {
  impl_->collective("a broadcast from rank 0", [&] {
    for (const auto& t : tensors) {
      std::vector<at::Tensor> one{t.detach()};
      c10d::BroadcastOptions o;
      o.rootRank = 0;
      impl_->group->broadcast(one, o)->wait();
    }
  });
}

bool DataParallel::any_rank(bool flag, const torch::Device& device) {
  const auto t = torch::tensor({flag ? 1 : 0}, torch::kInt32).to(device);
  impl_->collective("an all-reduce of a flag", [&] {
    std::vector<at::Tensor> one{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    impl_->group->allreduce(one, o)->wait();
  });
  return t.cpu().item<int>() != 0;
}

torch::Tensor DataParallel::gather_rows(const torch::Tensor& local, std::int64_t global) {
  const std::int64_t most = rank_slice(global, world_, 0).size;  // the first slices are largest
  auto shape = local.sizes().vec();
  shape[0] = most;
  auto padded = torch::zeros(shape, local.options());
  padded.narrow(0, 0, local.size(0)).copy_(local.detach());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_; ++r) out[0].push_back(torch::empty_like(padded));
  std::vector<at::Tensor> in{padded};
  impl_->collective("gathering the step's outputs",
                    [&] { impl_->group->allgather(out, in)->wait(); });
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < world_; ++r)
    parts.push_back(
        out[0][static_cast<std::size_t>(r)].narrow(0, 0, rank_slice(global, world_, r).size));
  return torch::cat(parts);
}

namespace {

class RankGlobalLoss : public StepLoss {
 public:
  RankGlobalLoss(const StepLoss& inner, DataParallel& dp, std::int64_t global)
      : inner_(inner), dp_(dp), global_(global) {}
  bool per_sample() const override { return false; }
  torch::Tensor loss_sum(const torch::Tensor&, const torch::Tensor&) const override {
    throw UsageError("a loss over the whole step has no per-sample sum");
  }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) const override {
    const auto all = dp_.gather_rows(out.detach(), global_).requires_grad_(true);
    const auto total = inner_.loss(all, dp_.gather_rows(y, global_));
    const auto offset = rank_slice(global_, dp_.world(), dp_.rank()).offset;
    const auto grad = torch::autograd::grad({total}, {all})[0].narrow(0, offset, out.size(0));
    const auto linear = (out * grad).sum();
    return linear - linear.detach() + total.detach() / dp_.world();
  }

 private:
  const StepLoss& inner_;
  DataParallel& dp_;
  std::int64_t global_;
};

}  // namespace

std::unique_ptr<StepLoss> rank_global_loss(const StepLoss& inner, DataParallel& dp,
                                           std::int64_t global) {
  return std::make_unique<RankGlobalLoss>(inner, dp, global);
}

std::int64_t DataParallel::broadcast_value(std::int64_t value, const torch::Device& device) {
  const auto t = torch::tensor({value}, torch::kInt64).to(device);
  broadcast({t});
  return t.cpu().item<std::int64_t>();
}

// One bucket: consecutive parameters (in reverse order) of one dtype, flattened for the
// all-reduce.
struct Bucket {
  std::vector<std::size_t> parameters;  // indices into Impl::parameters
  std::size_t waiting = 0;              // of them, not final yet this step
  torch::Tensor flat;
  c10::intrusive_ptr<c10d::Work> work;
};

// The hook on a parameter's gradient accumulator: runs after each accumulation.
class AccumulatedHook : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatedHook(std::function<void()> f) : f_(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    f_();
    return outputs;
  }

 private:
  std::function<void()> f_;
};

struct GradientReducer::Impl {
  DataParallel& dp;
  std::vector<torch::Tensor> parameters;
  std::vector<std::shared_ptr<torch::autograd::Node>>
      accumulators;  // kept alive: hooks live on them
  std::vector<std::uintptr_t> keys;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;  // per parameter
  std::vector<int> passes_left;        // per parameter, this step
  std::mutex mutex;
  bool active = false;
  double scale = 1;
  std::size_t next = 0;  // the next bucket to launch
  std::string failure;   // a launch that failed in a hook, thrown by finish()
  std::int64_t in_backward = 0;

  Impl(DataParallel& d) : dp(d) {}

  void launch(std::size_t b) {
    Bucket& bucket = buckets[b];
    std::vector<torch::Tensor> parts;
    for (const auto i : bucket.parameters) {
      const auto& p = parameters[i];
      parts.push_back(p.grad().defined() ? p.grad().detach().reshape(-1)
                                         : torch::zeros({p.numel()}, p.options()));
    }
    bucket.flat = torch::cat(parts).mul_(scale);
    std::vector<at::Tensor> one{bucket.flat};
    bucket.work = dp.impl_->group->allreduce(one);
  }
  // Launches the ready buckets from `next` on, in order; `hook`: called from backward.
  void launch_ready(bool hook) {
    while (next < buckets.size() && buckets[next].waiting == 0) {
      launch(next++);
      if (hook) ++in_backward;
    }
  }
  void on_accumulated(std::size_t i) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!active || !failure.empty() || passes_left[i] <= 0 || --passes_left[i] > 0) return;
    --buckets[bucket_of[i]].waiting;
    try {
      launch_ready(true);
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
};

GradientReducer::GradientReducer(DataParallel& dp, const std::vector<torch::Tensor>& parameters,
                                 std::int64_t bucket_bytes)
    : impl_(std::make_unique<Impl>(dp)) {
  Impl& m = *impl_;
  m.parameters.assign(parameters.rbegin(), parameters.rend());  // backward's order
  m.bucket_of.resize(m.parameters.size());
  m.passes_left.resize(m.parameters.size());
  for (std::size_t start = 0; start < m.parameters.size();) {  // one dtype per bucket
    std::size_t end = start;
    std::vector<std::int64_t> bytes;
    while (end < m.parameters.size() && m.parameters[end].dtype() == m.parameters[start].dtype()) {
      bytes.push_back(m.parameters[end].numel() * m.parameters[end].element_size());
      ++end;
    }
    for (auto& indices : gradient_buckets(bytes, bucket_bytes)) {
      for (auto& i : indices) {
        i += start;
        m.bucket_of[i] = m.buckets.size();
      }
      m.buckets.push_back(Bucket{std::move(indices), 0, {}, {}});
    }
    start = end;
  }
  for (std::size_t i = 0; i < m.parameters.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(m.parameters[i]);
    Impl* self = impl_.get();
    m.keys.push_back(accumulator->add_post_hook(
        std::make_unique<AccumulatedHook>([self, i] { self->on_accumulated(i); })));
    m.accumulators.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() {
  for (std::size_t i = 0; i < impl_->accumulators.size(); ++i)
    impl_->accumulators[i]->del_post_hook(impl_->keys[i]);
}

void GradientReducer::prepare(int passes, double scale) {
  Impl& m = *impl_;
  const std::lock_guard<std::mutex> lock(m.mutex);
  m.active = true;
  m.scale = scale;
  m.next = 0;
  std::fill(m.passes_left.begin(), m.passes_left.end(), passes);
  for (auto& b : m.buckets) b.waiting = passes > 0 ? b.parameters.size() : 0;
}

torch::Tensor GradientReducer::finish(const torch::Tensor& loss) {
  Impl& m = *impl_;
  torch::Tensor total;
  {
    const std::lock_guard<std::mutex> lock(m.mutex);
    m.active = false;
    if (!m.failure.empty()) m.dp.impl_->fail("a gradient all-reduce", m.failure);
    m.dp.impl_->collective("a gradient all-reduce", [&] {
      for (auto& b : m.buckets) b.waiting = 0;  // what backward did not reach: zeros
      m.launch_ready(false);
      total = loss.detach().to(torch::kFloat32).mul(m.scale).reshape({1});
      if (!m.parameters.empty()) total = total.to(m.parameters.front().device());
      std::vector<at::Tensor> one{total};
      auto work = m.dp.impl_->group->allreduce(one);
      for (auto& b : m.buckets) {
        b.work->wait();
        std::int64_t at = 0;
        for (const auto i : b.parameters) {
          auto& p = m.parameters[i];
          if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
          auto g = p.grad().detach();
          g.copy_(b.flat.narrow(0, at, g.numel()).view_as(g));
          at += g.numel();
        }
        b.work.reset();
        b.flat = torch::Tensor();
      }
      work->wait();
    });
  }
  return total.reshape({});
}

std::int64_t GradientReducer::buckets() const {
  return static_cast<std::int64_t>(impl_->buckets.size());
}
std::int64_t GradientReducer::launched_in_backward() const { return impl_->in_backward; }

void DataParallel::on_rank0(const std::function<void()>& action) {
  const std::string key = kRank0Key + std::to_string(impl_->rank0_calls++);
  if (rank_ == 0) {
    std::string outcome = "ok";
    try {
      action();
    } catch (const UsageError& e) {
      outcome = std::string("usage:") + e.what();
      impl_->store->set(key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
      throw;
    } catch (const std::exception& e) {
      outcome = std::string("error:") + e.what();
      impl_->store->set(key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
      throw;
    }
    impl_->store->set(key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
    return;
  }
  std::string outcome;
  impl_->collective("waiting for rank 0", [&] {
    const auto v = impl_->store->get(key);
    outcome.assign(v.begin(), v.end());
  });
  if (outcome.rfind("usage:", 0) == 0) throw UsageError("rank 0: " + outcome.substr(6));
  if (outcome != "ok") throw ResourceError("rank 0 failed: " + outcome.substr(6));
}

torch::Tensor rank_order(const torch::Tensor& order, const std::vector<std::int64_t>& steps,
                         const DataParallel& dp, const std::vector<double>& weights,
                         std::vector<double>& scales) {
  const auto positions = rank_positions(steps, dp.world(), dp.rank());
  scales.clear();
  torch::Tensor o;
  if (!weights.empty()) o = order.to(torch::kCPU).contiguous();
  std::int64_t start = 0;
  for (const auto global : steps) {
    const RankSlice slice = rank_slice(global, dp.world(), dp.rank());
    double all = static_cast<double>(global), mine = static_cast<double>(slice.size);
    if (!weights.empty()) {
      const std::int64_t* idx = o.data_ptr<std::int64_t>() + start;
      all = mine = 0;
      for (std::int64_t i = 0; i < global; ++i) {
        const double v = weights[static_cast<std::size_t>(idx[i])];
        all += v;
        if (i >= slice.offset && i < slice.offset + slice.size) mine += v;
      }
    }
    scales.push_back(all > 0 ? mine / all : 0.0);
    start += global;
  }
  return order.index_select(0, torch::tensor(positions, torch::kInt64).to(order.device()));
}

std::vector<torch::Tensor> buffers_of(torch::nn::Module& module) { return module.buffers(); }

void check_data_parallel(const TrainJob& job) {
  if (job.world_size == 1 && job.rank == 0 && !job.join_group) return;
  auto require = [](bool ok, const std::string& m) {
    if (!ok) throw UsageError(m);
  };
  require(job.world_size >= 1 && job.rank >= 0 && job.rank < job.world_size,
          "data parallel: RANK " + std::to_string(job.rank) + " is not in [0, WORLD_SIZE " +
              std::to_string(job.world_size) + ")");
  require(job.master_port > 0 && job.master_port < 65536,
          "data parallel: MASTER_PORT must be a port number (1-65535)");
  require(job.batch >= job.world_size, "data parallel: --batch " + std::to_string(job.batch) +
                                           " must be at least the " +
                                           std::to_string(job.world_size) + " processes");
  require(job.micro_batches <= job.batch / job.world_size,
          "data parallel: --micro-batches must be at most each process's part of the batch (" +
              std::to_string(job.batch / job.world_size) + ")");
}

}  // namespace mltool::train
