// Inside the MPI communicator (not for its users): what a collective's implementation fills in when it
// starts, so that collectives can live in files of their own (mpi_reduce_scatter.cpp) beside
// mpi_communicator.cpp. Includes mpi.h.
#pragma once

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "dist/mpi_communicator.h"

namespace tern::dist::mpi_detail {

// The requests of one started collective, the arrays MPI reads while it runs (alive until it is done), and
// what runs once when every request finished (e.g. the mean's division).
struct MpiRequests {
  std::vector<MPI_Request> reqs;
  std::vector<int> counts, displs;
  std::function<void()> finish;
};

// Issues the collective's MPI requests on `comm`; returns an MPI error code.
using PostFn = std::function<int(MpiRequests&)>;

// Numbers and announces a collective (the arrival notes), then lets `post` issue its requests; the handle
// waits for them with the communicator's timeout rules.
CommHandle StartCollective(const std::shared_ptr<MpiCommunicator::State>& state,
                           std::chrono::milliseconds timeout, CollectiveKind kind, size_t count,
                           const PostFn& post);
MPI_Comm CommOf(const MpiCommunicator::State& state);
void DivideBy(float* data, size_t n, int world);
Status CheckIntCount(size_t n, const char* what);

}  // namespace tern::dist::mpi_detail
