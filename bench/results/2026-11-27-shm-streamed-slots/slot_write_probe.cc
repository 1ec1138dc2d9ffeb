// The probe behind bench/results/2026-11-27-shm-streamed-slots.md: one process writes 64 MiB
// through a ring of shared-memory slots (plain or streaming stores), another adds each slot
// into its own buffer; prints each side's time. Build: g++ -O2 -mavx2 -o probe slot_write_probe.cc
// Run: ./probe SLOT_BYTES SLOTS STREAMING(0|1) [1: read a shared source instead of slots]
// cross-process chunk transfer probe: producer -> slots -> consumer reduce
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static void copyNT(float*d,const float*s,size_t n){for(size_t i=0;i<n;i+=8)_mm256_stream_ps(d+i,_mm256_loadu_ps(s+i));_mm_sfence();}
static void copyR(float*d,const float*s,size_t n){memcpy(d,s,n*4);}
int main(int argc,char**argv){
  size_t total=64<<20; size_t slot=atol(argv[1]); int nslots=atoi(argv[2]); int nt=atoi(argv[3]); int mode=argc>4?atoi(argv[4]):0;
  size_t n=total/4, sn=slot/4;
  char*sh=(char*)mmap(0,4096+slot*nslots+total,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  auto*flags=(std::atomic<long>*)sh; float*slots=(float*)(sh+4096); float*shsrc=(float*)(sh+4096+slot*nslots);
  memset(sh,0,4096+slot*nslots+total);
  for(size_t i=0;i<n;i++)shsrc[i]=1;
  const int iters=5; size_t chunks=n/sn;
  pid_t p=fork();
  if(p==0){pin(1);double wt=0;float*src=(float*)aligned_alloc(64,total);for(size_t i=0;i<n;i++)src[i]=1;
    for(int it=0;it<iters;it++){ while(flags[100].load()!=it) ; 
      if(mode==1) continue;
      for(size_t c=0;c<chunks;c++){long seq=it*chunks+c;int s=seq%nslots; while(flags[s*8].load(std::memory_order_acquire)!=seq) ;
        float*d=slots+s*sn; auto a=std::chrono::steady_clock::now(); if(nt)copyNT(d,src+c*sn,sn);else copyR(d,src+c*sn,sn); wt+=std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count(); flags[s*8+1].store(seq+1,std::memory_order_release);} }
    printf("  sender write time per iter %.2f ms\n",wt*1e3/iters);fflush(stdout);_exit(0);}
  pin(0); float*dst=(float*)aligned_alloc(64,total); for(size_t i=0;i<n;i++)dst[i]=1;
  for(int s=0;s<nslots;s++)flags[s*8].store(s);
  double best=1e9; double tt=0;
  for(int it=0;it<iters;it++){ auto t0=std::chrono::steady_clock::now(); flags[100].store(it);
    for(size_t c=0;c<chunks;c++){long seq=it*chunks+c;int s=seq%nslots; const float*in;
      if(mode==1){in=shsrc+c*sn;} else {while(flags[s*8+1].load(std::memory_order_acquire)!=seq+1);in=slots+s*sn;}
      auto a=std::chrono::steady_clock::now(); {unsigned long su=0; for(size_t i=0;i<sn;i+=16) su+=((const unsigned*)in)[i]; asm volatile(""::"r"(su));} tt+=std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count();
      float*o=dst+c*sn; for(size_t i=0;i<sn;i+=8)_mm256_store_ps(o+i,_mm256_add_ps(_mm256_load_ps(o+i),_mm256_loadu_ps(in+i)));
      if(mode!=1) flags[s*8].store(seq+nslots,std::memory_order_release);}
    double t=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count(); if(t<best)best=t;}
  wait(0); printf("  receiver touch time per iter %.2f ms\n",tt*1e3/iters); printf("slot %zu nslots %d nt %d mode %d: %.2f ms  %.2f GB/s\n",slot,nslots,nt,mode,best*1e3,total/best/1e9);
}
