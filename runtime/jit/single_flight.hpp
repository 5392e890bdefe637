#pragma once
// A thread-safe map whose values are built at most once per key, even when many threads
// miss the same key at the same time: the first builds, the rest wait for its result
// (or its exception). A failed build is not remembered, so a later call retries.
// Values are never removed, so returned references stay valid for the map's lifetime.
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace attnjit::jit {

template <class Key, class Value, class Hash>
class SingleFlightMap {
 public:
  // Fast path: a shared lock and one lookup.
  const Value* find(const Key& key) const noexcept {
    std::shared_lock lock(mutex_);
    auto it = ready_.find(key);
    return it == ready_.end() ? nullptr : it->second.get();
  }

  // `make()` returns std::unique_ptr<Value>; it runs without the lock held.
  template <class Make>
  const Value& get_or_create(const Key& key, Make&& make) {
    std::promise<const Value*> promise;
    {
      std::unique_lock lock(mutex_);
      if (auto it = ready_.find(key); it != ready_.end()) return *it->second;
      if (auto it = building_.find(key); it != building_.end()) {
        std::shared_future<const Value*> pending = it->second;
        lock.unlock();
        return *pending.get();  // rethrows the builder's exception
      }
      building_.emplace(key, promise.get_future().share());
    }
    try {
      std::unique_ptr<Value> value = make();
      const Value* ptr = value.get();
      {
        std::unique_lock lock(mutex_);
        ready_.emplace(key, std::move(value));
        building_.erase(key);
      }
      promise.set_value(ptr);
      return *ptr;
    } catch (...) {
      {
        std::unique_lock lock(mutex_);
        building_.erase(key);
      }
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return ready_.size();
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<Key, std::unique_ptr<Value>, Hash> ready_;
  std::unordered_map<Key, std::shared_future<const Value*>, Hash> building_;
};

}  // namespace attnjit::jit
