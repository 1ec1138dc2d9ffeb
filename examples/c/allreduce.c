/* The README's example: average a small gradient across the job's ranks.
 * Build against an installed Weft: cc allreduce.c $(pkg-config --cflags --libs weft)
 * Run: weftrun -n 4 ./a.out */
#include <stdio.h>
#include <weft/weft.h>

int main(void) {
  weftComm_t comm;
  /* Under weftrun, torchrun, mpirun or srun: rank, size and root come from the environment. */
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    fprintf(stderr, "init: %s\n", weftGetLastError(NULL));
    return 1;
  }
  int rank, nranks;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &nranks);
  float grad[4] = {1.0f * rank, 2, 3, 4};
  weftResult_t rc = weftAllReduce(grad, grad, 4, weftFloat32, weftAvg, comm, NULL);
  if (rc != weftSuccess) fprintf(stderr, "%s: %s\n", weftGetErrorString(rc), weftGetLastError(comm));
  else if (rank == 0) printf("avg of ranks: %g over %d ranks\n", grad[0], nranks);
  weftCommDestroy(comm);
  return rc == weftSuccess ? 0 : 1;
}
