// specbench's CPU matrix product for decode steps of a few rows, registered with XLA through
// jax.ffi (model/kernels.py loads it; setup.py builds it at `pip install`).
//
//   y[m, :] = x[m, :] w + b      x [rows, n_in], w [n_in, n_out] (HF Conv1D orientation), b [n_out]
//
// A decode step is memory-bound: it must read every weight once, whatever its number of rows
// (1 token, K+1 verified tokens, or B sequences of a batch). So the product streams each weight
// once and applies every row to each element it loads: w is read in panels of kPanel rows
// (kPanel sequential streams), each loaded vector of w is multiplied into all rows' accumulators,
// and the accumulators of a block of columns stay in L1 until the panel is done. Hand-written
// because XLA:CPU's products of 2-16 rows cost 2-3x a 1-row product on this project's CPU, and this
// one 1.03-1.4x, measured alternately in one process (docs/performance.md).
//
// Work is split over XLA's intra-op thread pool: along k (the rows of w, each thread summing into
// its own partial result) when the columns are few, along blocks of columns when they are many
// (the output head). Vector code is compiled for AVX-512, AVX2+FMA and plain x86-64, and the
// loader picks the best at run time (GCC's target_clones).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kLanes = 16;             // floats in one vector
constexpr int64_t kPanel = 8;              // rows of w read together: 8 sequential streams
constexpr int64_t kMaxRows = 16;           // rows of x applied per pass over w
constexpr int64_t kAccumulatorBytes = 32 << 10;  // a column block's accumulators, all rows: L1-sized
constexpr int64_t kSplitColumns = 16384;   // from this many columns per thread, tasks split columns
constexpr int64_t kMinTaskRows = 64;       // rows of w in the smallest k slice a task takes
constexpr int64_t kChunkRows = 64;         // rows of w that more than kMaxRows rows of x share in cache
constexpr int64_t kSmallBytes = 256 << 10; // below this, one thread: a wake-up costs more

typedef float vec __attribute__((vector_size(kLanes * sizeof(float))));

inline __attribute__((always_inline)) vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline __attribute__((always_inline)) void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

// y[m, j0:j1] += sum over k in [k0, k1) of x[m, k] w[k, j0:j1], for M rows; y's rows are ldy apart.
// The columns j0..j1 are a multiple of kLanes; k1 - k0 is a multiple of P.
template <int M, int P>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void accumulate(
    const float* x, int64_t ldx, const float* w, int64_t n_out, float* y, int64_t ldy, int64_t j0,
    int64_t j1, int64_t k0, int64_t k1) {
  // The loops over m and p are unrolled by pragma: left to GCC's own limits, the 12-row and
  // larger variants kept acc in memory and ran 3-5x slower (docs/performance.md).
  for (int64_t k = k0; k < k1; k += P) {
    float xs[M][P];  // the panel's x values, broadcast from memory into each multiply-add
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) xs[m][p] = x[m * ldx + k + p];
    const float* wk = w + k * n_out;
    for (int64_t j = j0; j < j1; j += kLanes) {
      vec acc[M];
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) acc[m] = load(y + m * ldy + j);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        vec wv = load(wk + p * n_out + j);
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) acc[m] += xs[m][p] * wv;
      }
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) store(y + m * ldy + j, acc[m]);
    }
  }
}

using Accumulate = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                            int64_t, int64_t, int64_t);

template <int P, int... Ms>
Accumulate pick(int64_t rows, std::integer_sequence<int, Ms...>) {
  static const Accumulate table[] = {accumulate<Ms + 1, P>...};
  return table[rows - 1];
}

template <int P>
Accumulate accumulate_for(int64_t rows) {
  return pick<P>(rows, std::make_integer_sequence<int, kMaxRows>{});
}

// A task's share: y[:, j0:j1] += x[:, k0:k1] w[k0:k1, j0:j1], every row. Up to kMaxRows rows take
// one pass over w, column block by block. More rows (a batch's verify step) take groups of kMaxRows
// over each chunk of kChunkRows rows of w and block of columns while that piece of w is still in
// cache, so w is read from memory once for every group. Each output sums over k in the same order
// either way.
void product_part(const float* x, int64_t rows, int64_t n_in, const float* w, int64_t n_out, float* y,
                  int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
  int64_t vec_end = j0 + (j1 - j0) / kLanes * kLanes;  // columns past it: the scalar tail below
  int64_t panel_end = k0 + (k1 - k0) / kPanel * kPanel;
  // a block of columns whose accumulators (M rows of them) stay in L1 while a panel runs over them
  int64_t M_max = std::min(kMaxRows, rows);
  int64_t block = std::max<int64_t>(256, kAccumulatorBytes / int64_t(sizeof(float) * M_max) / kLanes * kLanes);
  int64_t chunk = rows <= kMaxRows ? panel_end - k0 : kChunkRows;
  for (int64_t kc = k0; kc < panel_end; kc += chunk) {
    int64_t kc1 = std::min(panel_end, kc + chunk);
    for (int64_t c0 = j0; c0 < vec_end; c0 += block)
      for (int64_t m0 = 0; m0 < rows; m0 += kMaxRows) {
        int64_t M = std::min(kMaxRows, rows - m0);
        accumulate_for<kPanel>(M)(x + m0 * n_in, n_in, w, n_out, y + m0 * n_out, n_out, c0,
                                  std::min(vec_end, c0 + block), kc, kc1);
      }
  }
  for (int64_t m0 = 0; m0 < rows; m0 += kMaxRows) {
    int64_t M = std::min(kMaxRows, rows - m0);
    const float* xm = x + m0 * n_in;
    float* ym = y + m0 * n_out;
    for (int64_t c0 = j0; c0 < vec_end; c0 += block)  // the rows of w past the last whole panel
      accumulate_for<1>(M)(xm, n_in, w, n_out, ym, n_out, c0, std::min(vec_end, c0 + block), panel_end, k1);
    for (int64_t m = 0; m < M; ++m)  // the columns past the last whole vector
      for (int64_t j = vec_end; j < j1; ++j) {
        float s = 0.0f;
        for (int64_t k = k0; k < k1; ++k) s += xm[m * n_in + k] * w[k * n_out + j];
        ym[m * n_out + j] += s;
      }
  }
}

// Runs fn(0) .. fn(n-1) on the caller and up to threads - 1 tasks of XLA's pool; returns when all
// are done. Tasks take indices from a shared counter, so one that starts late finds nothing left
// and touches only the shared state it owns a reference to.
struct Counter {
  std::atomic<int64_t> next{0}, done{0};
  int64_t n = 0;
};

template <typename F>
void drain(Counter& c, const F& fn) {
  for (int64_t i; (i = c.next.fetch_add(1, std::memory_order_relaxed)) < c.n;) {
    fn(i);
    c.done.fetch_add(1, std::memory_order_release);
  }
}

template <typename F>
void parallel_for(ffi::ThreadPool& pool, int64_t n, int64_t threads, const F& fn) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto counter = std::make_shared<Counter>();
  counter->n = n;
  const F* f = &fn;
  for (int64_t t = 1; t < std::min(threads, n); ++t) pool.Schedule([counter, f] { drain(*counter, *f); });
  drain(*counter, fn);
  while (counter->done.load(std::memory_order_acquire) < n) __builtin_ia32_pause();
}

// y = x w + b. Tasks are four blocks of columns per thread where the columns are many (the output
// head), else slices of the rows of w (k), at least kMinTaskRows each and up to two per thread, so
// that the caller works through them while a helper thread wakes up. Each k slice sums into its
// own buffer and the buffers are added in a fixed order: the result does not depend on which thread
// ran which task, nor on how many rows x has (a row comes out bit-identical alone or among others).
void product(ffi::ThreadPool& pool, const float* x, int64_t rows, const float* w, int64_t n_in,
             int64_t n_out, const float* b, float* y) {
  int64_t bytes = n_in * n_out * int64_t(sizeof(float));
  int64_t threads = bytes < kSmallBytes ? 1 : std::max<int64_t>(1, pool.num_threads());
  int64_t column_tasks = n_out >= kSplitColumns * threads ? 4 * threads : 1;
  int64_t task_columns = (n_out / kLanes + column_tasks - 1) / column_tasks * kLanes;  // whole vectors
  int64_t k_tasks = column_tasks > 1 ? 1 : std::clamp<int64_t>(n_in / kMinTaskRows, 1, 2 * threads);
  int64_t k_step = (n_in / k_tasks + kPanel - 1) / kPanel * kPanel;
  std::unique_ptr<float[]> partial(new float[(k_tasks - 1) * rows * n_out]);
  parallel_for(pool, k_tasks * column_tasks, threads, [&](int64_t task) {
    int64_t ks = task / column_tasks, cs = task % column_tasks;
    int64_t k0 = std::min(n_in, ks * k_step), k1 = ks + 1 == k_tasks ? n_in : std::min(n_in, k0 + k_step);
    int64_t j0 = std::min(n_out, cs * task_columns);
    int64_t j1 = cs + 1 == column_tasks ? n_out : std::min(n_out, j0 + task_columns);
    float* out = ks == 0 ? y : partial.get() + (ks - 1) * rows * n_out;
    for (int64_t m = 0; m < rows; ++m) {  // the task's own block starts at the bias (y) or at zero
      float* o = out + m * n_out + j0;
      if (ks == 0 && b != nullptr) std::memcpy(o, b + j0, (j1 - j0) * sizeof(float));
      else std::memset(o, 0, (j1 - j0) * sizeof(float));
    }
    product_part(x, rows, n_in, w, n_out, out, j0, j1, k0, k1);
  });
  for (int64_t s = 0; s + 1 < k_tasks; ++s) {
    const float* p = partial.get() + s * rows * n_out;
    for (int64_t i = 0; i < rows * n_out; ++i) y[i] += p[i];
  }
}

// x [..., rows, n_in]; w [..., L, n_in, n_out] (leading 1s under vmap); b [..., L, n_out], or no
// elements for no bias; layer: which of the L matrices, int32 with one element; y [..., rows, n_out].
ffi::Error Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                  ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = w.dimensions();
  if (dims.size() < 2) return ffi::Error::InvalidArgument("specbench_matmul: w must have 2 or more dimensions");
  int64_t n_in = dims[dims.size() - 2], n_out = dims[dims.size() - 1];
  if (n_in == 0 || n_out == 0) return ffi::Error::InvalidArgument("specbench_matmul: w has no elements");
  int64_t n_layers = int64_t(w.element_count()) / (n_in * n_out), rows = int64_t(x.element_count()) / n_in;
  int64_t l = layer.element_count() == 1 ? layer.typed_data()[0] : -1;
  if (l < 0 || l >= n_layers) return ffi::Error::InvalidArgument("specbench_matmul: layer out of range");
  if (int64_t(x.element_count()) % n_in != 0 || int64_t(y->element_count()) != rows * n_out)
    return ffi::Error::InvalidArgument("specbench_matmul: x, w and y do not match");
  bool bias = b.element_count() > 0;
  if (bias && int64_t(b.element_count()) != n_layers * n_out)
    return ffi::Error::InvalidArgument("specbench_matmul: b does not match w");
  if (rows == 0) return ffi::Error::Success();
  product(pool, x.typed_data(), rows, w.typed_data() + l * n_in * n_out, n_in, n_out,
          bias ? b.typed_data() + l * n_out : nullptr, y->typed_data());
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(specbench_matmul, Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
