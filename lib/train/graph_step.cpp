#include "graph_step.hpp"

#include <torch/torch.h>

#include "mltool/train/optimizer.hpp"

// libtorch_cuda holds CUDAGraph; mltool's CPU-only module links without it (this file is
// compiled once more for it with MLTOOL_WITHOUT_TORCH_CUDA, lib/CMakeLists.txt).
#if defined(MLTOOL_HAVE_CUDA) && !defined(MLTOOL_WITHOUT_TORCH_CUDA)
#define MLTOOL_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mltool::train {
#ifdef MLTOOL_CUDA_GRAPHS
namespace {

// `waiter` waits for what is queued on `done` so far.
void wait_for(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& done) {
  at::cuda::CUDAEvent event;
  event.record(done);
  event.block(waiter);
}

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type();
}

class CudaGraphStep final : public GraphStep {
 public:
  CudaGraphStep(const torch::Device& device, FusedAdamW& optimizer, StepWork work)
      : device_(device),
        optimizer_(optimizer),
        work_(std::move(work)),
        side_(c10::cuda::getStreamFromPool(false, device.index())) {}

  bool takes(const Batch& b) const override {
    return state_ != State::unfused && !b.mask.defined() &&
           (!x_.defined() || (same(b.x, x_) && same(b.y, y_)));
  }

  bool captured() const override { return state_ == State::captured; }

  torch::Tensor step(const Batch& b, double lr) override {
    const c10::cuda::CUDAGuard on_device(device_.index());
    if (!x_.defined()) {
      x_ = torch::empty_like(b.x, torch::MemoryFormat::Contiguous);
      y_ = torch::empty_like(b.y, torch::MemoryFormat::Contiguous);
      lr_ = torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    }
    x_.copy_(b.x);
    y_.copy_(b.y);
    lr_.fill_(lr);
    const Batch in{x_, y_, {}, b.size, b.ids};
    const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
    if (state_ == State::fresh) {  // eagerly, on the capture stream: its lazy set-up
      wait_for(side_, current);
      torch::Tensor loss;
      {
        const c10::cuda::CUDAStreamGuard on_side(side_);
        loss = work_(in);
      }
      wait_for(current, side_);
      // A step that is not ATen's fused update (some parameters in another type, say) would
      // bake its host-side step counts and learning rate into the graph: it stays eager.
      if (!optimizer_.fusable())
        state_ = State::unfused;
      else if (++warm_steps_ == kWarmSteps)
        state_ = State::warm;
      return loss;
    }
    if (state_ == State::warm) {
      capture(in, current);
      state_ = State::captured;
    } else {
      optimizer_.count_replayed(stepped_);  // the capture counted its own step
    }
    graph_.replay();
    return loss_.clone();
  }

 private:
  enum class State { fresh, warm, captured, unfused };
  // Eager steps before the capture: cuBLAS and cuDNN set up on the capture stream, and a
  // TorchScript model's executor done profiling and optimising (at its second call).
  static constexpr int kWarmSteps = 3;

  void capture(const Batch& in, const c10::cuda::CUDAStream& current) {
    wait_for(side_, current);
    {
      const c10::cuda::CUDAStreamGuard on_side(side_);
      optimizer_.read_lr_from(lr_);
      // Thread-local: the feed's threads go on with their own copies and events meanwhile.
      graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        loss_ = work_(in);
        graph_.capture_end();
      } catch (...) {
        optimizer_.read_lr_from({});
        try {
          graph_.capture_end();  // ends the stream's capture; the graph is not used
        } catch (...) {
        }
        throw;
      }
      optimizer_.read_lr_from({});
    }
    wait_for(current, side_);
    stepped_ = optimizer_.last_stepped();
  }

  torch::Device device_;
  FusedAdamW& optimizer_;
  StepWork work_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAGraph graph_;
  State state_ = State::fresh;
  int warm_steps_ = 0;
  torch::Tensor x_, y_, lr_, loss_;
  std::vector<void*> stepped_;
};

}  // namespace

std::unique_ptr<GraphStep> make_graph_step(const torch::Device& device, FusedAdamW& optimizer,
                                           StepWork work) {
  if (!device.is_cuda()) return nullptr;
  return std::make_unique<CudaGraphStep>(device, optimizer, std::move(work));
}

#else

std::unique_ptr<GraphStep> make_graph_step(const torch::Device&, FusedAdamW&, StepWork) {
  return nullptr;
}

#endif
}  // namespace mltool::train
