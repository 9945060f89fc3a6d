// Tests of mltool::util::BoundedQueue: order, back-pressure, close(), and exactly-once
// delivery with many producers and consumers. A test that fails closes the queue before
// joining its threads, so a broken queue fails instead of hanging.
#include "mltool/util/bounded_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

using mltool::util::BoundedQueue;

namespace {

// Polls `pred` for up to `limit`; true as soon as it holds.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Time for a thread to reach its blocking wait. Not an assertion on its own: the tests
// check afterwards that the thread has NOT got past the wait.
void let_it_block() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

}  // namespace

TEST(BoundedQueue, FirstInFirstOut) {
  BoundedQueue<int> q(8);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(q.push(i));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q.pop(), std::optional<int>(i));
  // Interleaved pushes and pops keep the order too.
  ASSERT_TRUE(q.push(100));
  ASSERT_TRUE(q.push(101));
  EXPECT_EQ(q.pop(), 100);
  ASSERT_TRUE(q.push(102));
  EXPECT_EQ(q.pop(), 101);
  EXPECT_EQ(q.pop(), 102);
}

TEST(BoundedQueue, MoveOnlyItems) {
  BoundedQueue<std::unique_ptr<int>> q(2);
  ASSERT_TRUE(q.push(std::make_unique<int>(7)));
  auto item = q.pop();
  ASSERT_TRUE(item.has_value());
  ASSERT_NE(*item, nullptr);
  EXPECT_EQ(**item, 7);
}

TEST(BoundedQueue, PushBlocksWhileFullUntilAPop) {
  BoundedQueue<int> q(2);
  ASSERT_TRUE(q.push(1));
  ASSERT_TRUE(q.push(2));
  std::atomic<bool> started{false}, pushed{false};
  std::atomic<int> result{-1};
  std::thread producer([&] {
    started = true;
    result = q.push(3) ? 1 : 0;
    pushed = true;
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  let_it_block();
  EXPECT_FALSE(pushed.load()) << "push into a full queue must wait";
  EXPECT_EQ(q.pop(), 1);
  const bool done = eventually([&] { return pushed.load(); });
  EXPECT_TRUE(done) << "a pop must wake the blocked producer";
  if (!done) q.close();
  producer.join();
  EXPECT_EQ(result.load(), 1);
  EXPECT_EQ(q.pop(), 2);
  EXPECT_EQ(q.pop(), 3);
}

TEST(BoundedQueue, CapacityZeroMeansOne) {
  BoundedQueue<int> q(0);
  std::atomic<int> pushed{0};
  std::thread producer([&] {
    for (int i = 0; i < 2; ++i)
      if (q.push(i)) ++pushed;
  });
  ASSERT_TRUE(eventually([&] { return pushed.load() >= 1; })) << "one item fits";
  let_it_block();
  EXPECT_EQ(pushed.load(), 1) << "the second waits";
  EXPECT_EQ(q.pop(), 0);
  const bool done = eventually([&] { return pushed.load() == 2; });
  EXPECT_TRUE(done);
  if (!done) q.close();
  producer.join();
  EXPECT_EQ(q.pop(), 1);
}

TEST(BoundedQueue, CloseWakesABlockedProducerAndDrains) {
  BoundedQueue<int> q(1);
  ASSERT_TRUE(q.push(42));
  std::atomic<bool> started{false}, returned{false};
  std::atomic<int> result{-1};
  std::thread producer([&] {
    started = true;
    result = q.push(43) ? 1 : 0;
    returned = true;
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  let_it_block();
  EXPECT_FALSE(returned.load());
  q.close();
  EXPECT_TRUE(eventually([&] { return returned.load(); })) << "close must wake the producer";
  producer.join();
  EXPECT_EQ(result.load(), 0) << "a push cut short by close() reports false";
  // Consumers drain what was queued before close(), then get nothing; later pushes fail.
  EXPECT_EQ(q.pop(), std::optional<int>(42));
  EXPECT_EQ(q.pop(), std::nullopt);
  EXPECT_EQ(q.pop(), std::nullopt);
  EXPECT_FALSE(q.push(44));
  EXPECT_EQ(q.pop(), std::nullopt);
}

TEST(BoundedQueue, CloseWakesBlockedConsumers) {
  BoundedQueue<int> q(4);
  constexpr int kConsumers = 3;
  std::atomic<int> started{0}, got_nothing{0}, got_item{0};
  std::vector<std::thread> consumers;
  for (int i = 0; i < kConsumers; ++i)
    consumers.emplace_back([&] {
      ++started;
      if (q.pop().has_value())
        ++got_item;
      else
        ++got_nothing;
    });
  ASSERT_TRUE(eventually([&] { return started.load() == kConsumers; }));
  let_it_block();
  EXPECT_EQ(got_nothing.load() + got_item.load(), 0) << "pop on an empty queue must wait";
  ASSERT_TRUE(q.push(5));
  EXPECT_TRUE(eventually([&] { return got_item.load() == 1; })) << "a push wakes one consumer";
  q.close();
  EXPECT_TRUE(eventually([&] { return got_nothing.load() == kConsumers - 1; }))
      << "close wakes the others";
  for (auto& t : consumers) t.join();
  EXPECT_EQ(got_item.load(), 1);
}

TEST(BoundedQueue, ManyProducersAndConsumersDeliverEachItemOnce) {
  constexpr int kProducers = 4, kConsumers = 4, kPerProducer = 20000;
  BoundedQueue<int> q(7);
  std::vector<std::vector<int>> received(kConsumers);
  std::vector<std::thread> consumers, producers;
  for (int c = 0; c < kConsumers; ++c)
    consumers.emplace_back([&, c] {
      while (auto item = q.pop()) received[c].push_back(*item);
    });
  std::atomic<int> refused{0};
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i)
        if (!q.push(p * kPerProducer + i)) ++refused;
    });
  for (auto& t : producers) t.join();
  q.close();
  for (auto& t : consumers) t.join();
  EXPECT_EQ(refused.load(), 0);

  std::vector<int> seen(kProducers * kPerProducer, 0);
  std::size_t total = 0;
  int out_of_order = 0;
  for (int c = 0; c < kConsumers; ++c) {
    std::vector<int> last(kProducers, -1);
    for (int v : received[c]) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, kProducers * kPerProducer);
      ++seen[v];
      // One queue is FIFO, so each consumer sees each producer's items in order.
      const int p = v / kPerProducer;
      if (v <= last[p]) ++out_of_order;
      last[p] = v;
    }
    total += received[c].size();
  }
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(total, static_cast<std::size_t>(kProducers * kPerProducer));
  int wrong = 0;
  for (int n : seen) wrong += n != 1;
  EXPECT_EQ(wrong, 0) << "items lost or delivered twice";
}
