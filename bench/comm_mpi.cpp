// all_reduce bandwidth under mpirun: epl's MPI backend and a plain MPI_Allreduce loop on the
// same buffers, alternating per size (A B A B ...). Rank 0 prints one JSON line.
//   mpirun -np 2 bench_comm_mpi          4 KiB to 256 MiB in steps of 4x
//   mpirun -np 2 bench_comm_mpi --fine   4 KiB to 2 MiB in steps of 1.5x and 1.33x (where epl
//                                        changes algorithm: fused, MPI_Allreduce, ring)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "epl/comm/mpi/mpi.hpp"

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  epl::comm::MpiEnvironment env(&argc, &argv);
  epl::comm::MpiCommunicator c;
  const int n = c.size();
  if (c.rank() == 0) std::printf("{\"impl\": \"epl mpi\", \"ranks\": %d, \"rows\": [", n);
  bool first = true;
  std::vector<std::size_t> sizes;
  if (argc > 1 && std::strcmp(argv[1], "--fine") == 0) {
    for (std::size_t b = 4096; b <= (std::size_t{2} << 20); b *= 2) sizes.insert(sizes.end(), {b, b / 2 * 3});
    sizes.pop_back();
  } else {
    for (std::size_t b = 4096; b <= (std::size_t{256} << 20); b *= 4) sizes.push_back(b);
  }
  for (std::size_t bytes : sizes) {
    std::vector<float> buf(bytes / 4, 1.0f);
    const int its = static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / bytes, 5, 200));
    std::vector<double> ours, plain;
    epl::comm::Buffer x(buf.data(), static_cast<std::int64_t>(buf.size()), epl::DType::kF32);
    c.all_reduce(x, epl::comm::ReduceOp::kSum);
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < its; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      c.all_reduce(x, epl::comm::ReduceOp::kSum);
      double t1 = MPI_Wtime();
      MPI_Barrier(MPI_COMM_WORLD);
      double t2 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t3 = MPI_Wtime();
      double mine[2] = {t1 - t0, t3 - t2}, slowest[2];
      MPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      ours.push_back(slowest[0]);
      plain.push_back(slowest[1]);
    }
    if (c.rank() == 0) {
      const double a = static_cast<double>(bytes) / median(ours) / 1e9, p = static_cast<double>(bytes) / median(plain) / 1e9;
      std::printf("%s{\"bytes\": %zu, \"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f, \"mpi_allreduce_algbw_gbs\": %.3f, \"ratio\": %.3f}",
                  first ? "" : ", ", bytes, a, a * 2 * (n - 1) / n, p, a / p);
    }
    first = false;
  }
  if (c.rank() == 0) std::printf("]}\n");
}
