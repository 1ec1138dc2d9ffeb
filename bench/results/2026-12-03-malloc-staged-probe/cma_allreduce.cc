// The second probe behind bench/results/2026-12-03-malloc-staged-probe.md: a 2-process float32
// sum all-reduce of private (malloc) buffers, out of place, by process_vm_readv (CMA): the
// reduce-scatter reads the peer's input block through a bounce buffer and sums it with this
// rank's into the output; barrier; the all-gather reads the peer's summed block straight into
// the output. Build: g++ -O2 -march=native -o cma_allreduce cma_allreduce.cc
// Run: ./cma_allreduce BYTES [BOUNCE_BYTES, default 256 KiB]; needs ptrace read permission
// between the two processes (Yama ptrace_scope 0, or root). Prints best and mean of 30 calls.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static void add(float*o,const float*a,const float*b,size_t n){for(size_t i=0;i<n;i+=16)_mm512_storeu_ps(o+i,_mm512_add_ps(_mm512_loadu_ps(a+i),_mm512_loadu_ps(b+i)));}
struct alignas(64) Slot{std::atomic<long> seq; float* in; float* out; pid_t pid; char pad[32];};
int main(int argc,char**argv){
  size_t bytes=atol(argv[1]); size_t bounceBytes=argc>2?atol(argv[2]):262144;
  size_t n=bytes/4;
  Slot*sh=(Slot*)mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int me=fork()==0?1:0; pin(me);
  float*in=(float*)aligned_alloc(4096,bytes); float*out=(float*)aligned_alloc(4096,bytes);
  float*bounce=(float*)aligned_alloc(4096,bounceBytes);
  for(size_t i=0;i<n;i++){in[i]=1+me;out[i]=0;}
  sh[me].in=in; sh[me].out=out; sh[me].pid=getpid();
  long seq=0; auto barrier=[&]{++seq; sh[me].seq.store(seq,std::memory_order_seq_cst); while(sh[1-me].seq.load(std::memory_order_acquire)<seq);};
  barrier();
  float*pin_=sh[1-me].in; float*pout=sh[1-me].out; pid_t pp=sh[1-me].pid;
  size_t half=n/2, mine=me*half, other=(1-me)*half, bn=bounceBytes/4;
  const int iters=30; double best=1e9,sum=0; double rs=0,ag=0;
  for(int it=0;it<iters+5;it++){
    barrier(); auto t0=std::chrono::steady_clock::now();
    for(size_t at=0;at<half;at+=bn){ size_t c=std::min(bn,half-at);
      iovec l{bounce,c*4}, r{pin_+mine+at,c*4}; if(process_vm_readv(pp,&l,1,&r,1,0)!=(ssize_t)(c*4)){perror("rs");_exit(1);}
      add(out+mine+at,in+mine+at,bounce,c); }
    auto t1=std::chrono::steady_clock::now();
    barrier();
    auto t2=std::chrono::steady_clock::now();
    { iovec l{out+other,half*4}, r{pout+other,half*4}; if(process_vm_readv(pp,&l,1,&r,1,0)!=(ssize_t)(half*4)){perror("ag");_exit(1);} }
    auto t3=std::chrono::steady_clock::now();
    barrier();
    double t=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    if(it>=5){ if(t<best)best=t; sum+=t; rs+=std::chrono::duration<double>(t1-t0).count(); ag+=std::chrono::duration<double>(t3-t2).count(); }
  }
  if(out[0]!=3||out[n-1]!=3){printf("rank %d wrong %f %f\n",me,out[0],out[n-1]);}
  if(me==0)printf("bytes %zu bounce %zu: best %.1f us (%.2f GB/s) mean %.1f us (%.2f GB/s); rs %.1f ag %.1f us\n",bytes,bounceBytes,best*1e6,bytes/best/1e9,sum/iters*1e6,bytes/(sum/iters)/1e9,rs/iters*1e6,ag/iters*1e6);
  fflush(stdout);
  if(me==0)wait(nullptr);
}
