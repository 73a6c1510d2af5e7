#pragma once
/// \file
/// \brief The MPI datatypes and reductions of epl's dtypes (part of epl::mpi). 16-bit floats have
/// no MPI type: they travel as 2-byte elements with user reductions that combine in float.
#include <array>

#include "epl/comm/mpi/environment.hpp"
#include "epl/comm/reduce.hpp"

namespace epl {
inline namespace v0 {
namespace comm {

namespace detail {
/// 16-bit floats have no MPI type: they travel as 2-byte elements with user reductions.
template <class T, ReduceOp Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, *len, dtype_v<T>, Op);
}
struct MpiTypes {
  MPI_Datatype two_bytes = MPI_DATATYPE_NULL;
  std::array<std::array<MPI_Op, 4>, 2> half_ops{};  // [f16, bf16][op]
  MpiTypes() {
    EPL_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &two_bytes));
    EPL_MPI_CHECK(MPI_Type_commit(&two_bytes));
    make<half>(half_ops[0]);
    make<bfloat16>(half_ops[1]);
    // MPI_Finalize deletes MPI_COMM_SELF's attributes first: free the types and ops there.
    int key = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &release, &key, this);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, this);
  }
  static int release(MPI_Comm, int key, void* attr, void*) {
    auto* t = static_cast<MpiTypes*>(attr);
    MPI_Type_free(&t->two_bytes);
    for (auto& ops : t->half_ops) {
      MPI_Op_free(&ops[0]);
      MPI_Op_free(&ops[2]);
      MPI_Op_free(&ops[3]);
    }
    MPI_Comm_free_keyval(&key);
    return MPI_SUCCESS;
  }
  template <class T>
  static void make(std::array<MPI_Op, 4>& ops) {
    MPI_Op_create(&half_op<T, ReduceOp::kSum>, 1, &ops[0]);
    ops[1] = ops[0];  // mean = sum, then divide
    MPI_Op_create(&half_op<T, ReduceOp::kMax>, 1, &ops[2]);
    MPI_Op_create(&half_op<T, ReduceOp::kMin>, 1, &ops[3]);
  }
  static MpiTypes& get() {
    static MpiTypes t;
    return t;
  }
};
inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default: return MpiTypes::get().two_bytes;
  }
}
inline MPI_Op mpi_op(DType t, ReduceOp op) {
  if (t == DType::kF16) return MpiTypes::get().half_ops[0][static_cast<int>(op)];
  if (t == DType::kBF16) return MpiTypes::get().half_ops[1][static_cast<int>(op)];
  switch (op) {
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    default: return MPI_SUM;
  }
}
}  // namespace detail

}  // namespace comm
}  // namespace v0
}  // namespace epl
