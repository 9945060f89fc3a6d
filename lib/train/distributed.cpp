#include "distributed.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// NCCL where CUDA is built and nccl.h is on the include path (the nvidia-nccl wheel's
// include/ directory); compiled there, never run so far (docs/train.md#data-parallel).
#if defined(MLTOOL_HAVE_CUDA) && __has_include(<nccl.h>)
#define MLTOOL_HAVE_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>

#include "mltool/train/data_parallel.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

constexpr std::int64_t kBucketBytes = std::int64_t{25} << 20;
constexpr const char* kRank0Key = "mltool/rank0";

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master == "127.0.0.1" || master == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
  std::string where;  // "rank R of W"

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

void DataParallel::all_reduce_sum(const std::vector<torch::Tensor>& tensors) {
  // Buckets of ~25 MB of consecutive tensors of one dtype.
  std::vector<std::vector<std::size_t>> buckets;
  for (std::size_t start = 0; start < tensors.size();) {
    std::size_t end = start;
    std::vector<std::int64_t> bytes;
    while (end < tensors.size() && tensors[end].dtype() == tensors[start].dtype()) {
      bytes.push_back(tensors[end].numel() * tensors[end].element_size());
      ++end;
    }
    for (auto bucket : gradient_buckets(bytes, kBucketBytes)) {
      for (auto& i : bucket) i += start;
      buckets.push_back(std::move(bucket));
    }
    start = end;
  }
  impl_->collective("a gradient all-reduce", [&] {
    std::vector<std::vector<at::Tensor>> flat;
    std::vector<c10::intrusive_ptr<c10d::Work>> work;
    for (const auto& bucket : buckets) {  // all launched, then all awaited
      std::vector<torch::Tensor> parts;
      for (const auto i : bucket) parts.push_back(tensors[i].detach().reshape(-1));
      flat.push_back({torch::cat(parts)});
      work.push_back(impl_->group->allreduce(flat.back()));
    }
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      work[b]->wait();
      std::int64_t at = 0;
      for (const auto i : buckets[b]) {
        auto t = tensors[i].detach();
        t.copy_(flat[b][0].narrow(0, at, t.numel()).view_as(t));
        at += t.numel();
      }
    }
  });
}

void DataParallel::on_rank0(const std::function<void()>& action) {
  if (rank_ == 0) {
    std::string outcome = "ok";
    try {
      action();
    } catch (const UsageError& e) {
      outcome = std::string("usage:") + e.what();
      impl_->store->set(kRank0Key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
      throw;
    } catch (const std::exception& e) {
      outcome = std::string("error:") + e.what();
      impl_->store->set(kRank0Key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
      throw;
    }
    impl_->store->set(kRank0Key, std::vector<uint8_t>(outcome.begin(), outcome.end()));
    return;
  }
  std::string outcome;
  impl_->collective("waiting for rank 0", [&] {
    const auto v = impl_->store->get(kRank0Key);
    outcome.assign(v.begin(), v.end());
  });
  if (outcome.rfind("usage:", 0) == 0) throw UsageError("rank 0: " + outcome.substr(6));
  if (outcome != "ok") throw ResourceError("rank 0 failed: " + outcome.substr(6));
}

torch::Tensor rank_order(const torch::Tensor& order, std::int64_t batch, const DataParallel& dp,
                         const std::vector<std::int64_t>& labels,
                         const torch::Tensor& class_weights, std::vector<double>& scales) {
  const std::int64_t used = order.size(0), steps = used / batch;
  const RankSlice slice = rank_slice(batch, dp.world(), dp.rank());
  const auto positions = rank_positions(used, batch, dp.world(), dp.rank());
  scales.assign(static_cast<std::size_t>(steps),
                static_cast<double>(slice.size) / static_cast<double>(batch));
  if (class_weights.defined()) {
    const auto w = class_weights.to(torch::kCPU, torch::kFloat64).contiguous();
    const double* cw = w.data_ptr<double>();
    const auto o = order.to(torch::kCPU).contiguous();
    const std::int64_t* idx = o.data_ptr<std::int64_t>();
    for (std::int64_t k = 0; k < steps; ++k) {
      double all = 0, mine = 0;
      for (std::int64_t i = 0; i < batch; ++i) {
        const double v = cw[labels[static_cast<std::size_t>(idx[k * batch + i])]];
        all += v;
        if (i >= slice.offset && i < slice.offset + slice.size) mine += v;
      }
      scales[static_cast<std::size_t>(k)] = all > 0 ? mine / all : 0.0;
    }
  }
  return order.index_select(0, torch::tensor(positions, torch::kInt64).to(order.device()));
}

torch::Tensor reduce_gradients(DataParallel& dp, const std::vector<torch::Tensor>& parameters,
                               const torch::Tensor& loss, double scale) {
  std::vector<torch::Tensor> tensors;
  for (const auto& p : parameters) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    tensors.push_back(p.grad().mul_(scale));
  }
  auto total = loss.detach().to(torch::kFloat32).mul(scale).reshape({1});
  if (!tensors.empty()) total = total.to(tensors.back().options());
  tensors.push_back(total);
  dp.all_reduce_sum(tensors);
  return total.reshape({});
}

std::vector<torch::Tensor> buffers_of(torch::nn::Module& module) { return module.buffers(); }

void check_data_parallel(const TrainJob& job) {
  if (job.world_size == 1 && job.rank == 0) return;
  auto require = [](bool ok, const std::string& m) {
    if (!ok) throw UsageError(m);
  };
  require(job.world_size >= 1 && job.rank >= 0 && job.rank < job.world_size,
          "data parallel: RANK " + std::to_string(job.rank) + " is not in [0, WORLD_SIZE " +
              std::to_string(job.world_size) + ")");
  require(job.master_port > 0 && job.master_port < 65536,
          "data parallel: MASTER_PORT must be a port number (1-65535)");
  require(job.dist_timeout >= 1, "--dist-timeout must be at least 1 second");
  require(job.batch >= job.world_size, "data parallel: --batch " + std::to_string(job.batch) +
                                           " must be at least the " +
                                           std::to_string(job.world_size) + " processes");
  require(job.micro_batches <= job.batch / job.world_size,
          "data parallel: --micro-batches must be at most each process's part of the batch (" +
              std::to_string(job.batch / job.world_size) + ")");
  require(!job.resume,
          "data parallel: --resume is not supported; resume in one process (same --batch)");
}

}  // namespace mltool::train
