// epl::precompiled's part for MPI programs (compiled when epl is built with MPI): the type-erased
// model of the MPI backend and the launcher's run over MPI_COMM_WORLD, so an MPI program does not
// compile every collective of it itself.
#define EPL_PRECOMPILED_SOURCE
#define EPL_PRECOMPILED_MPI_DEFINITIONS  // MpiLauncher::run_world's one definition
#include "epl/comm/mpi/launcher.hpp"
#include "epl/comm/mpi/mpi.hpp"

namespace epl {
inline namespace v0 {
namespace comm {
template class detail::CommunicatorModel<MpiCommunicator, true>;
template class detail::CommunicatorModel<MpiCommunicator, false>;
}  // namespace comm
}  // namespace v0
}  // namespace epl
