// specbench's CPU matrix product for decode steps of a few rows, registered with XLA through
// jax.ffi (model/kernels/cpu.py packs the weights and loads it; setup.py builds it at `pip install`).
//
//   y[m, :] = x[m, :] w + b      x [rows, n_in], w [n_in, n_out] packed in panels, b [n_out]
//
// A decode step is memory-bound: it must read every weight once, whatever its number of rows
// (1 token, K+1 verified tokens, or B sequences of a batch). So the product streams each weight
// once and applies every row to each element it loads. The weights are packed once, at load, into
// panels of kWidth columns, w_packed[p][k][c] = w[k][p kWidth + c] (zeros past n_out): a panel is
// one contiguous stream, 64 bytes per row of w. A register tile (up to kGroup rows of x by one
// panel, or 1-3 rows by 2-4 panels) holds its sums in registers over all of k, so each
// loaded vector of w meets every row with no traffic to the sums; more rows than one tile take
// groups of kGroup over each chunk of kChunk rows of the panel while that chunk is in L1, so w is
// still read from memory once. Hand-written because XLA:CPU's products of 2-16 rows cost 2-3x a
// 1-row product on this project's CPU (docs/performance.md has the measurements).
//
// Every output is its bias plus the products over k in order, one fused multiply-add after
// another, whatever the tile, the number of rows or the thread: a row comes out bit-identical
// alone or among others. The tiles are compiled for AVX-512, AVX2+FMA and SSE2, each with the
// vector width its registers hold, and chosen once at run time from the CPU's features.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kWidth = 16;              // columns of a panel: 64 bytes of float32 per row of w
constexpr int kGroup = 6;                   // rows of x in one register tile (6 x 16 sums)
constexpr int64_t kChunk = 64;              // rows of a panel that several groups share in L1 (4 KB)
constexpr int64_t kAhead = 32 * kWidth;     // a one-panel tile prefetches 32 rows (2 KB) ahead
constexpr int64_t kSmallBytes = 256 << 10;  // below this, one thread: a wake-up costs more
constexpr int64_t kTasksPerThread = 4;      // tasks are runs of adjacent panels

template <typename V>
inline __attribute__((always_inline)) V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
inline __attribute__((always_inline)) void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// The weights a tile reads, from panel q at q * stride elements from the first. F32Panels:
// float32, packed as above. Q8Panels: llama.cpp's Q8_0 (kernels/q8_0.py), int8 codes packed in the
// same panels, but each four rows k..k+3 of a panel interleaved, [n_in / 4][kWidth][4], so that one
// int32 lane holds a column's four codes and shifts alone widen them (GCC 12 turns a generic int8
// -> float vector conversion into scalar code); beside them the scales, one per block of kBlock
// rows and column, packed in panels of [n_in / kBlock][kWidth] floats. A weight is
// float(code) * scale, the dequantized weight: a product equals the float32 kernel's over the
// dequantized matrix bit for bit. Each source gives kStep rows of a panel's vector at a time and
// may hold something per run of kRun rows (Q8_0's scales).
typedef float v16 __attribute__((vector_size(64)));  // AVX-512: 32 registers of 16 floats
typedef float v8 __attribute__((vector_size(32)));   // AVX2: 16 registers of 8 floats
typedef float v4 __attribute__((vector_size(16)));   // SSE2: 16 registers of 4 floats
template <typename V>
struct Ints;  // the int32 vector of V's lanes
template <> struct Ints<v16> { typedef int32_t type __attribute__((vector_size(64))); };
template <> struct Ints<v8> { typedef int32_t type __attribute__((vector_size(32))); };
template <> struct Ints<v4> { typedef int32_t type __attribute__((vector_size(16))); };

constexpr int64_t kBlock = 32;  // Q8_0's block: 32 weights of k share a scale

struct F32Panels {
  static constexpr int64_t kRun = int64_t(1) << 40, kStep = 1;
  const float* w;
  int64_t stride;
  F32Panels at(int64_t first, int64_t gap) const { return {w + first * stride, gap * stride}; }
  template <typename V, int P>
  struct Run {};
  template <typename V, int P>
  Run<V, P> run(int64_t) const { return {}; }
  template <typename V, int P>
  inline __attribute__((always_inline)) void rows(const Run<V, P>&, int q, int64_t k, int v, V* out) const {
    out[0] = load<V>(w + q * stride + k * kWidth + v * int64_t(sizeof(V) / sizeof(float)));
  }
  const void* ahead(int64_t k) const { return w + k * kWidth + kAhead; }
};

struct Q8Panels {
  static constexpr int64_t kRun = kBlock, kStep = 4;
  const int8_t* codes;
  const float* d;
  int64_t stride, d_stride;  // between panels: n_in * kWidth codes, n_in / kBlock * kWidth scales
  Q8Panels at(int64_t first, int64_t gap) const {
    return {codes + first * stride, d + first * d_stride, gap * stride, gap * d_stride};
  }
  template <typename V, int P>
  struct Run {
    V s[P][kWidth / (sizeof(V) / sizeof(float))];  // the block's scales
  };
  template <typename V, int P>
  inline __attribute__((always_inline)) Run<V, P> run(int64_t k) const {
    constexpr int kLanes = sizeof(V) / sizeof(float);
    Run<V, P> out;
    for (int q = 0; q < P; ++q)
      for (int v = 0; v < kWidth / kLanes; ++v) out.s[q][v] = load<V>(d + q * d_stride + k / kBlock * kWidth + v * kLanes);
    return out;
  }
  template <typename V, int P>
  inline __attribute__((always_inline)) void rows(const Run<V, P>& r, int q, int64_t k, int v, V* out) const {
    using I = typename Ints<V>::type;
    I four;  // lanes v kLanes.. of the 4-row group at k: column c's codes of rows k..k+3, low byte first
    std::memcpy(&four, codes + q * stride + k * kWidth + v * int64_t(sizeof(I)), sizeof four);
    out[0] = __builtin_convertvector((four << 24) >> 24, V) * r.s[q][v];
    out[1] = __builtin_convertvector((four << 16) >> 24, V) * r.s[q][v];
    out[2] = __builtin_convertvector((four << 8) >> 24, V) * r.s[q][v];
    out[3] = __builtin_convertvector(four >> 24, V) * r.s[q][v];
  }
  const void* ahead(int64_t k) const { return codes + k * kWidth + 4 * kAhead; }  // 2 KB ahead, as f32's
};

// sums[q][m][:] += x[m, k0:k1] w_panel(q)[k0:k1, :] for M rows and P panels of `w`; sums[q][m]
// is at s + (q * ldq + m) * kWidth. V is the vector type of the target the caller is compiled
// for; its registers hold the P * M * kWidth sums. Each output adds its products in order of k.
template <typename V, int M, int P, typename W>
inline __attribute__((always_inline)) void tile(const float* x, int64_t ldx, const W& w, float* s, int64_t ldq,
                                                int64_t k0, int64_t k1) {
  constexpr int kLanes = sizeof(V) / sizeof(float), kVectors = kWidth / kLanes, kStep = W::kStep;
  V sum[P][M][kVectors];
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q)
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) sum[q][m][v] = load<V>(s + (q * ldq + m) * kWidth + v * kLanes);
  for (int64_t r0 = k0; r0 < k1; r0 += W::kRun) {
    const auto run = w.template run<V, P>(r0);
    const int64_t r1 = std::min(k1, r0 + W::kRun);
    for (int64_t k = r0; k < r1; k += kStep) {
      V wk[P][kVectors][kStep];
      // one stream runs ahead of the hardware prefetcher; several at once did not need it
      if (P == 1) __builtin_prefetch(w.ahead(k));
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q)
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) w.template rows<V, P>(run, q, k, v, wk[q][v]);
#pragma GCC unroll 4
      for (int j = 0; j < kStep; ++j)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          float xm = x[m * ldx + k + j];
#pragma GCC unroll 4
          for (int q = 0; q < P; ++q)
#pragma GCC unroll 4
            for (int v = 0; v < kVectors; ++v) sum[q][m][v] += xm * wk[q][v][j];
        }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q)
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) store<V>(s + (q * ldq + m) * kWidth + v * kLanes, sum[q][m][v]);
}

template <typename W>
using Tile = void (*)(const float*, int64_t, const W&, float*, int64_t, int64_t, int64_t);

// The tiles one target offers for one source: by_rows[M - 1] (one panel, 1..kGroup rows),
// two[M - 1] (two panels, 1..3 rows) and four (four panels, 1 row).
template <typename W>
struct Tiles {
  Tile<W> by_rows[kGroup], two[3], four;
};

#define SPECBENCH_TILES(NAME, TARGET, V)                                                             \
  template <int M, int P, typename W>                                                                \
  __attribute__((target(TARGET))) void NAME(const float* x, int64_t ldx, const W& w, float* s,      \
                                            int64_t ldq, int64_t k0, int64_t k1) {                  \
    tile<V, M, P, W>(x, ldx, w, s, ldq, k0, k1);                                                     \
  }                                                                                                  \
  template <typename W>                                                                              \
  const Tiles<W> NAME##_tiles = {                                                                    \
      {NAME<1, 1, W>, NAME<2, 1, W>, NAME<3, 1, W>, NAME<4, 1, W>, NAME<5, 1, W>, NAME<6, 1, W>},    \
      {NAME<1, 2, W>, NAME<2, 2, W>, NAME<3, 2, W>},                                                 \
      NAME<1, 4, W>};

SPECBENCH_TILES(tile_avx512, "avx512f", v16)
SPECBENCH_TILES(tile_avx2, "avx2,fma", v8)
SPECBENCH_TILES(tile_sse2, "sse2", v4)

template <typename W>
const Tiles<W>& tiles() {
  static const Tiles<W>* chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &tile_avx512_tiles<W>;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &tile_avx2_tiles<W>;
    return &tile_sse2_tiles<W>;
  }();
  return *chosen;
}

// y[:, panels p0..p1) = x w + b for every row. rows <= 3 take tiles of P = 4 (1 row) or 2 (2-3
// rows) panels a span apart, P long sequential streams at once (adjacent panels, or one stream,
// read the 1-token step of the draft's head 10-15% slower); more rows take one panel at a time, in
// groups of at most kGroup rows over each chunk of kChunk rows of w, so that the chunk is read
// from memory once for all of them.
template <typename W>
void panels_product(const float* x, int64_t rows, int64_t n_in, const W& w, int64_t p0, int64_t p1,
                    const float* b, float* y, int64_t n_out) {
  const Tiles<W>& t = tiles<W>();
  int64_t groups = (rows + kGroup - 1) / kGroup, chunk = groups == 1 ? n_in : kChunk;
  std::vector<float> sums(4 * rows * kWidth);  // [panel][row][column] of the panels in flight
  auto run = [&](int64_t first, int64_t gap, int P) {  // panels first, first + gap, .. together
    for (int q = 0; q < P; ++q) {  // the sums start at the bias
      int64_t j0 = (first + q * gap) * kWidth, columns = std::min(kWidth, n_out - j0);
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t c = 0; c < kWidth; ++c) sums[(q * rows + m) * kWidth + c] = b && c < columns ? b[j0 + c] : 0.0f;
    }
    for (int64_t k0 = 0; k0 < n_in; k0 += chunk)
      for (int64_t g = 0; g < groups; ++g) {
        int64_t m0 = g * rows / groups, m1 = (g + 1) * rows / groups;
        Tile<W> tile = P == 4 ? t.four : P == 2 ? t.two[m1 - m0 - 1] : t.by_rows[m1 - m0 - 1];
        tile(x + m0 * n_in, n_in, w.at(first, gap), sums.data() + m0 * kWidth, rows, k0, std::min(n_in, k0 + chunk));
      }
    for (int q = 0; q < P; ++q) {  // the columns past n_out (the last panel's padding) are dropped
      int64_t j0 = (first + q * gap) * kWidth, columns = std::min(kWidth, n_out - j0);
      for (int64_t m = 0; m < rows; ++m)
        std::memcpy(y + m * n_out + j0, sums.data() + (q * rows + m) * kWidth, columns * sizeof(float));
    }
  };
  int P = rows == 1 ? 4 : rows <= 3 ? 2 : 1;
  int64_t span = (p1 - p0) / P;
  for (int64_t i = 0; i < span; ++i) run(p0 + i, span, P);
  for (int64_t p = p0 + P * span; p < p1; ++p) run(p, 1, 1);  // the panels left over
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

// What both products check and share: x [..., rows, n_in]; the codes or weights [..., L,
// n_panels, n_in, kWidth] (leading 1s under vmap); b [..., L, n_out], or no elements for no bias;
// layer: which of the L matrices, int32 with one element; y [..., rows, n_out].
struct Shape {
  int64_t n_in = 0, n_panels = 0, n_out = 0, n_layers = 0, rows = 0, layer = 0;
};

template <typename B>
ffi::Error shape_of(const char* name, ffi::Buffer<ffi::F32> x, const B& w, ffi::Buffer<ffi::F32> b,
                    ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32>& y, Shape& s) {
  auto dims = w.dimensions(), y_dims = y->dimensions();
  auto fail = [name](const char* why) { return ffi::Error::InvalidArgument(std::string(name) + ": " + why); };
  if (dims.size() < 3 || dims[dims.size() - 1] != kWidth || y_dims.size() < 1)
    return fail("w must be packed [..., n_panels, n_in, 16]");
  s.n_in = dims[dims.size() - 2], s.n_panels = dims[dims.size() - 3], s.n_out = y_dims[y_dims.size() - 1];
  if (s.n_in == 0 || s.n_panels == 0) return fail("w has no elements");
  if (s.n_out > s.n_panels * kWidth || s.n_out <= (s.n_panels - 1) * kWidth) return fail("y's columns do not match w's panels");
  int64_t matrix = s.n_panels * s.n_in * kWidth;
  s.n_layers = int64_t(w.element_count()) / matrix, s.rows = int64_t(x.element_count()) / s.n_in;
  s.layer = layer.element_count() == 1 ? layer.typed_data()[0] : -1;
  if (s.layer < 0 || s.layer >= s.n_layers) return fail("layer out of range");
  if (int64_t(x.element_count()) % s.n_in != 0 || int64_t(y->element_count()) != s.rows * s.n_out)
    return fail("x, w and y do not match");
  if (b.element_count() > 0 && int64_t(b.element_count()) != s.n_layers * s.n_out) return fail("b does not match w");
  return ffi::Error::Success();
}

// y = x w[layer] + b[layer] over tasks of adjacent panels, kTasksPerThread per thread, so that
// the caller works through them while a helper thread wakes up; a matrix of under kSmallBytes
// (as float32) runs on the caller alone.
template <typename W>
void product(ffi::ThreadPool& pool, const Shape& s, const float* x, const W& w, const float* b, float* y,
             int64_t bytes) {
  int64_t threads = bytes < kSmallBytes ? 1 : std::max<int64_t>(1, pool.num_threads());
  int64_t tasks = std::min(s.n_panels, kTasksPerThread * threads);
  parallel_for(pool, tasks, threads, [&](int64_t task) {
    panels_product(x, s.rows, s.n_in, w, task * s.n_panels / tasks, (task + 1) * s.n_panels / tasks, b, y, s.n_out);
  });
}

ffi::Error Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                  ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  Shape s;
  if (auto error = shape_of("specbench_matmul", x, w, b, layer, y, s); error.failure()) return error;
  if (s.rows == 0) return ffi::Error::Success();
  int64_t matrix = s.n_panels * s.n_in * kWidth;
  const float* bl = b.element_count() > 0 ? b.typed_data() + s.layer * s.n_out : nullptr;
  F32Panels panels{w.typed_data() + s.layer * matrix, s.n_in * kWidth};
  product(pool, s, x.typed_data(), panels, bl, y->typed_data(), matrix * int64_t(sizeof(float)));
  return ffi::Error::Success();
}

// The same product from Q8_0 weights: codes [..., L, n_panels, n_in, kWidth] int8 (rows
// interleaved by fours: Q8Panels), d [..., L, n_panels, n_in / 32, kWidth] their scales (float32
// holding llama.cpp's float16 values). n_in must be a multiple of 32.
ffi::Error MatmulQ8(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> codes,
                    ffi::Buffer<ffi::F32> d, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::S32> layer,
                    ffi::ResultBuffer<ffi::F32> y) {
  Shape s;
  if (auto error = shape_of("specbench_matmul_q8", x, codes, b, layer, y, s); error.failure()) return error;
  if (s.n_in % kBlock != 0) return ffi::Error::InvalidArgument("specbench_matmul_q8: n_in must be a multiple of 32");
  int64_t matrix = s.n_panels * s.n_in * kWidth, scales = matrix / kBlock;
  if (int64_t(d.element_count()) != s.n_layers * scales)
    return ffi::Error::InvalidArgument("specbench_matmul_q8: d must be packed [..., n_panels, n_in / 32, 16]");
  if (s.rows == 0) return ffi::Error::Success();
  const float* bl = b.element_count() > 0 ? b.typed_data() + s.layer * s.n_out : nullptr;
  Q8Panels w{codes.typed_data() + s.layer * matrix, d.typed_data() + s.layer * scales, s.n_in * kWidth,
             s.n_in / kBlock * kWidth};
  // threads by the work (a weight dequantized and multiplied), not the bytes: a quarter of the
  // bytes kept a 256 x 768 matrix on one thread, at twice its float32 time
  product(pool, s, x.typed_data(), w, bl, y->typed_data(), matrix * int64_t(sizeof(float)));
  return ffi::Error::Success();
}

// The memory roof's reader: the sum of x, streamed once by every thread of the pool, each over
// runs of kReadTask bytes with the widest vectors this CPU has and eight sums in flight (no
// reassociation is left to the compiler). It reads as a decode step's product does, so a step
// cannot beat it: XLA's own sum, the roof before, read slower than the product kernel above on
// this project's CPU (docs/performance.md).
constexpr int64_t kReadTask = 1 << 20;  // floats: 4 MB a task

template <typename V>
inline __attribute__((always_inline)) float stream_sum(const float* x, int64_t n) {
  constexpr int kLanes = sizeof(V) / sizeof(float), kSums = 8;
  V sums[kSums] = {};
  int64_t i = 0;
  for (; i + kSums * kLanes <= n; i += kSums * kLanes)
#pragma GCC unroll 8
    for (int s = 0; s < kSums; ++s) sums[s] += load<V>(x + i + s * kLanes);
  float total = 0.0f;
  for (int s = 0; s < kSums; ++s)
    for (int l = 0; l < kLanes; ++l) total += sums[s][l];
  for (; i < n; ++i) total += x[i];
  return total;
}

__attribute__((target("avx512f"))) float stream_sum_avx512(const float* x, int64_t n) { return stream_sum<v16>(x, n); }
__attribute__((target("avx2"))) float stream_sum_avx2(const float* x, int64_t n) { return stream_sum<v8>(x, n); }
__attribute__((target("sse2"))) float stream_sum_sse2(const float* x, int64_t n) { return stream_sum<v4>(x, n); }

float (*stream_summer())(const float*, int64_t) {
  static const auto chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &stream_sum_avx512;
    if (__builtin_cpu_supports("avx2")) return &stream_sum_avx2;
    return &stream_sum_sse2;
  }();
  return chosen;
}

// x [n] float32; y [tasks] float32: each task's sum (the caller adds them: the answer shows every
// element was read).
ffi::Error StreamRead(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  int64_t n = x.element_count(), tasks = (n + kReadTask - 1) / kReadTask;
  if (int64_t(y->element_count()) != tasks)
    return ffi::Error::InvalidArgument("specbench_stream_read: y must hold one sum per 4 MB of x");
  const float* xs = x.typed_data();
  float* ys = y->typed_data();
  auto sum = stream_summer();
  parallel_for(pool, tasks, std::max<int64_t>(1, pool.num_threads()), [&](int64_t t) {
    int64_t i0 = t * kReadTask;
    ys[t] = sum(xs + i0, std::min(n, i0 + kReadTask) - i0);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(specbench_stream_read, StreamRead,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(specbench_matmul_q8, MatmulQ8,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(specbench_matmul, Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
