// MpiCommunicator::ReduceScatterInPlaceAsync: MPI_Ireduce_scatter with per-rank counts (MPI allows uneven
// ones) and MPI_IN_PLACE. In place, MPI takes the input from the receive buffer and leaves this rank's result
// at its start; the result is moved to this rank's piece when the collective finishes.
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "dist/mpi_work.h"

namespace tern::dist {

CommHandle MpiCommunicator::ReduceScatterInPlaceAsync(float* data, std::span<const size_t> counts,
                                                      ReduceOp op) {
  const int world = this->world(), me = rank();
  if (counts.size() != static_cast<size_t>(world))
    return CommHandle::Failed(Status::InvalidArgument(
        fmt::format("mpi in-place reduce-scatter: {} counts for a world of {}; pass one per rank",
                    counts.size(), world)));
  const size_t n = std::accumulate(counts.begin(), counts.end(), size_t{0});
  if (Status s = mpi_detail::CheckIntCount(n, "reduce-scatter"); !s.ok()) return CommHandle::Failed(s);
  size_t offset = 0;
  for (int r = 0; r < me; r++) offset += counts[static_cast<size_t>(r)];
  const size_t mine = counts[static_cast<size_t>(me)];
  MPI_Comm comm = mpi_detail::CommOf(*state_);
  return mpi_detail::StartCollective(
      state_, timeout(), CollectiveKind::kReduceScatter, n, [&](mpi_detail::MpiRequests& w) {
        for (size_t c : counts) w.counts.push_back(static_cast<int>(c));
        MPI_Request req;
        if (int rc = MPI_Ireduce_scatter(MPI_IN_PLACE, data, w.counts.data(), MPI_FLOAT, MPI_SUM, comm, &req);
            rc != MPI_SUCCESS)
          return rc;
        w.reqs.push_back(req);
        w.finish = [data, offset, mine, world, op] {
          if (offset > 0 && mine > 0) std::memmove(data + offset, data, mine * sizeof(float));
          if (op == ReduceOp::kMean) mpi_detail::DivideBy(data + offset, mine, world);
        };
        return MPI_SUCCESS;
      });
}

}  // namespace tern::dist
