// The probe behind bench/results/2026-12-03-malloc-staged-probe.md: a 2-process float32 sum
// all-reduce of private (malloc) buffers through one shared staging buffer per rank, in three
// phases with a barrier between: each rank copies the block its peer sums into its staging; sums
// its own block (its input + the peer's staging) into its output and its staging; copies the
// peer's sum out. The same bytes cross cores as in Weft's slot ring, in whole-call pieces.
// Build: g++ -O2 -march=native -mcldemote -o staged_probe staged_probe.cc
// Run:   ./staged_probe BYTES STREAMING(0|1) IN_PLACE(0|1) [PIECE_BYTES|0] [DEMOTE(0|1|2)]
//        DEMOTE 1: cldemote each line this rank wrote into shared memory; 2: also what it read.
// Prints the best and the mean of 30 calls (after 5 warm-up) and each rank's time per phase.
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
static void copyNT(float*d,const float*s,size_t n){for(size_t i=0;i<n;i+=16)_mm512_stream_ps(d+i,_mm512_loadu_ps(s+i));_mm_sfence();}
static int gDemote=0;
static void demote(const void*p,size_t bytes){if(!gDemote)return;for(size_t i=0;i<bytes;i+=64)_cldemote((char*)p+i);}
static void add2(float*o1,float*o2,const float*a,const float*b,size_t n){for(size_t i=0;i<n;i+=16){__m512 v=_mm512_add_ps(_mm512_loadu_ps(a+i),_mm512_loadu_ps(b+i));_mm512_storeu_ps(o1+i,v);_mm512_storeu_ps(o2+i,v);}}
struct alignas(64) Flag{std::atomic<long> v;char pad[56];};
int main(int argc,char**argv){
  size_t bytes=atol(argv[1]); int nt=atoi(argv[2]); int inplace=argc>3?atoi(argv[3]):0; size_t piece=argc>4&&atol(argv[4])?atol(argv[4]):bytes; gDemote=argc>5?atoi(argv[5]):0;
  size_t n=bytes/4, pn=piece/4;
  char*sh=(char*)mmap(0,4096+2*piece,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  Flag*fl=(Flag*)sh; float*S[2]={(float*)(sh+4096),(float*)(sh+4096+piece)};
  memset(sh,0,4096+2*piece);
  int me=fork()==0?1:0; pin(me);
  float*in=(float*)aligned_alloc(64,bytes); float*out=inplace?in:(float*)aligned_alloc(64,bytes);
  for(size_t i=0;i<n;i++){in[i]=1;out[i]=0;}
  long seq=0; auto barrier=[&]{++seq; fl[me].v.store(seq,std::memory_order_release); while(fl[1-me].v.load(std::memory_order_acquire)<seq);};
  const int iters=30; double best=1e9, sum=0; double ph[3]={0,0,0}; auto now=[]{return std::chrono::steady_clock::now();};
  for(int it=0;it<iters+5;it++){
    barrier(); auto t0=std::chrono::steady_clock::now();
    for(size_t p0=0;p0<n;p0+=pn){ size_t half=pn/2; float*pin_=in+p0; float*pout=out+p0;
      size_t mine=me*half, other=(1-me)*half;
      // A: copy the peer's block into my staging
      auto q0=now();
      if(nt) copyNT(S[me]+other,pin_+other,half); else memcpy(S[me]+other,pin_+other,half*4);
      demote(S[me]+other,half*4);
      auto q1=now(); barrier();
      // B: reduce my block: my input + peer staging -> my out + my staging
      auto q2=now(); add2(pout+mine,S[me]+mine,pin_+mine,S[1-me]+mine,half); demote(S[me]+mine,half*4); if(gDemote>1)demote(S[1-me]+mine,half*4); auto q3=now();
      barrier();
      // C: copy peer's result
      if(nt) copyNT(pout+other,S[1-me]+other,half); else memcpy(pout+other,S[1-me]+other,half*4); if(gDemote>1)demote(S[1-me]+other,half*4);
      auto q4=now(); if(it>=5){ph[0]+=std::chrono::duration<double>(q1-q0).count();ph[1]+=std::chrono::duration<double>(q3-q2).count();ph[2]+=std::chrono::duration<double>(q4-q3).count();}
      barrier();
    }
    double t=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    if(it>=5&&t<best)best=t; if(it>=5)sum+=t;
  }
  if(me==0)printf("bytes %zu nt %d inplace %d piece %zu: best %.1f us  busbw %.2f GB/s  mean %.1f us  busbw %.2f GB/s\n",bytes,nt,inplace,piece,best*1e6,bytes/best/1e9,sum/iters*1e6,bytes/(sum/iters)/1e9);
  printf("rank %d phases us per call: copyin %.1f reduce %.1f copyout %.1f\n",me,ph[0]*1e6/iters,ph[1]*1e6/iters,ph[2]*1e6/iters);
  if(me==0)wait(nullptr);
}
