#pragma once
/// \file
/// \brief What this CPU can run, read at run time: CPUID for the instruction sets, XCR0 for the
/// state the operating system saves, and on Linux the permission a process must ask before it
/// may touch AMX's tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`). The
/// kernels' build says what was compiled (`-march`); this says what may run here.
#include <cerrno>
#include <cstdint>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define EPL_X86_64 1
#endif
#if defined(EPL_X86_64) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace epl {
inline namespace v0 {
namespace device {
/// \brief The kernel that multiplies AMP's bf16 operands on a CPU (device::Cpu::bf16_kernel()).
enum class CpuBf16Kernel {
  kRoundedF32,  ///< f32 FMA on operands rounded to bf16 as they are packed
  kAvx512Bf16,  ///< VDPBF16PS: two bf16 products a lane, f32 sums
  kAmx,         ///< AMX tiles: TDPBF16PS, 16 x 16 x 32 products an instruction
};
/// \brief The kernel's name, as benchmarks and messages print it.
constexpr const char* name(CpuBf16Kernel k) {
  return k == CpuBf16Kernel::kAmx ? "amx" : k == CpuBf16Kernel::kAvx512Bf16 ? "avx512-bf16" : "rounded-f32";
}
}  // namespace device

namespace detail::cpu {

/// \brief The instruction sets the kernels choose among, as this CPU and its OS offer them.
struct Isa {
  bool avx2 = false;         ///< AVX2 with FMA and F16C, with the OS saving ymm registers
  bool avx512 = false;       ///< AVX-512 F and BW, with the OS saving zmm and mask registers
  bool avx512_bf16 = false;  ///< VDPBF16PS and VCVTNE2PS2BF16
  bool amx_bf16 = false;     ///< AMX tiles with TDPBF16PS, the tile data granted to this process
  bool amx_hardware = false; ///< the CPU has AMX-BF16 and the OS enables its state (granted or not)
  int amx_refused = 0;       ///< errno of Linux's refusal of the tile data, where amx_hardware
};

#if defined(EPL_X86_64)
namespace isa_detail {
inline std::uint64_t xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}
// Linux keeps AMX's 8 KiB of tile data out of a thread's saved state until the process asks for
// it; a tile instruction before that faults (SIGILL). The grant is for the whole process; Linux
// refuses it (ENOSPC...) where a thread's alternate signal stack is too small for the larger
// signal frame. Returns 0 or the errno of the refusal.
inline int request_tile_data() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0 ? 0 : errno;
#else
  return ENOSYS;
#endif
}
inline Isa probe() {
  Isa isa;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return isa;  // no OSXSAVE: no XGETBV
  const bool fma_f16c = (c & (1u << 12)) && (c & (1u << 29)) && (c & (1u << 28));  // FMA, F16C, AVX
  const std::uint64_t saved = xcr0();
  constexpr std::uint64_t kAvx512State = 0xE6;            // SSE, AVX, opmask, ZMM upper halves, ZMM16-31
  constexpr std::uint64_t kTileState = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return isa;
  const unsigned ebx7 = b, edx7 = d;
  isa.avx2 = fma_f16c && (ebx7 & (1u << 5)) && (saved & 0x6) == 0x6;  // AVX2; SSE and AVX state
  isa.avx512 = (ebx7 & (1u << 16)) && (ebx7 & (1u << 30)) && (saved & kAvx512State) == kAvx512State;
  if (isa.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) isa.avx512_bf16 = (a & (1u << 5)) != 0;
  const bool amx = (edx7 & (1u << 24)) && (edx7 & (1u << 22));  // AMX-TILE, AMX-BF16
  isa.amx_hardware = amx && isa.avx512_bf16 && (saved & kTileState) == kTileState;
  if (isa.amx_hardware) isa.amx_refused = request_tile_data();
  isa.amx_bf16 = isa.amx_hardware && isa.amx_refused == 0;
  return isa;
}
}  // namespace isa_detail

/// \brief This CPU's instruction sets, probed once per process (and AMX's tile data requested).
inline const Isa& isa() {
  static const Isa probed = isa_detail::probe();
  return probed;
}
#else
inline const Isa& isa() {
  static const Isa none;
  return none;
}
#endif

/// \brief Of the instruction sets above, those this translation unit was compiled for (-march).
constexpr Isa compiled_isa() {
  Isa i;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  i.avx2 = true;
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  i.avx512 = true;
#endif
#if defined(__AVX512BF16__)
  i.avx512_bf16 = true;
#endif
  return i;
}
/// \brief The instruction sets code compiled for `compiled` needs that `cpu` lacks, named for a
/// message ("" when it runs there). AMX is asked for at run time, so no build needs it.
inline std::string missing_isa(const Isa& compiled, const Isa& cpu) {
  std::string missing;
  auto need = [&](bool built, bool has, const char* name) {
    if (built && !has) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  need(compiled.avx2, cpu.avx2, "AVX2 with FMA and F16C");
  need(compiled.avx512, cpu.avx512, "AVX-512 (F and BW)");
  need(compiled.avx512_bf16, cpu.avx512_bf16, "AVX512-BF16");
  return missing;
}

}  // namespace detail::cpu
}  // namespace v0
}  // namespace epl
