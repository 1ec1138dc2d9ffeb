// Data-parallel training with no Python: the seed model (two conv + batch-norm + ReLU + max-pool
// blocks and a linear layer) on Fashion-MNIST from Debian's dataset-fashion-mnist, gradients
// averaged by Weft's DDP layer. Start one process per rank:
//
//   weftrun -n 2 build/bin/train_fashion_mnist [--epochs 1] [--max-steps N] [--batch 64]
//
// Rank 0 prints the loss (averaged over ranks) as it goes, the test accuracy (every rank scores
// its shard, the counts are summed) and saves the model.
#include <torch/torch.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/ddp_torch.hpp"

namespace {

// An IDX file (gzip'd, as Debian ships them): big-endian magic, dimensions, then uint8 data.
torch::Tensor readIdx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path + " (Debian: apt-get install dataset-fashion-mnist)");
  auto readU32 = [&] {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) throw std::runtime_error(path + ": truncated header");
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  };
  const uint32_t magic = readU32();
  if ((magic >> 8) != 0x08 || (magic & 0xff) == 0 || (magic & 0xff) > 4) throw std::runtime_error(path + ": not IDX uint8");
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (uint32_t d = 0; d < (magic & 0xff); ++d) {
    dims.push_back(readU32());
    total *= dims.back();
  }
  torch::Tensor t = torch::empty(dims, torch::kUInt8);
  int64_t done = 0;
  while (done < total) {
    int n = gzread(f, t.data_ptr<uint8_t>() + done, static_cast<unsigned>(std::min<int64_t>(total - done, 1 << 30)));
    if (n <= 0) throw std::runtime_error(path + ": truncated data");
    done += n;
  }
  gzclose(f);
  return t;
}

struct Data {
  torch::Tensor images;  // N x 1 x 28 x 28, normalized
  torch::Tensor labels;  // N, int64
};

Data load(const std::string& dir, const std::string& prefix) {
  Data d;
  d.images = (readIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz").to(torch::kFloat).div_(255.0).sub_(0.2860).div_(0.3530))
                 .unsqueeze(1);
  d.labels = readIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz").to(torch::kLong);
  return d;
}

torch::nn::Sequential makeModel() {
  namespace nn = torch::nn;
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::BatchNorm2d(16), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(7 * 7 * 32, 10));
}

torch::Tensor batchOf(const torch::Tensor& all, const std::vector<size_t>& indices, size_t begin, size_t end) {
  std::vector<int64_t> ids(indices.begin() + static_cast<long>(begin), indices.begin() + static_cast<long>(end));
  return all.index_select(0, torch::tensor(ids, torch::kLong));
}

void check(weftResult_t rc, weftComm_t comm, const char* what) {
  if (rc != weftSuccess) throw std::runtime_error(std::string(what) + ": " + weftGetLastError(comm));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataDir = "/usr/share/datasets/fashion-mnist", save = "fashion_mnist_model.pt";
  long epochs = 1, maxSteps = -1, batch = 64;
  double lr = 0.05;
  const char* usage =
      "usage: train_fashion_mnist [--data DIR] [--epochs N >= 1] [--max-steps N >= 1] [--batch B >= 1] [--lr LR > 0] "
      "[--save FILE]\n";
  // A whole number at least 1, or a positive number: anything else is a usage error.
  auto count = [](const std::string& text, long* out) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < 1) return false;
    *out = v;
    return true;
  };
  auto positive = [](const std::string& text, double* out) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) return false;
    *out = v;
    return true;
  };
  for (int a = 1; a < argc; a += 2) {
    const std::string flag = argv[a];
    if (flag == "-h" || flag == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    const bool known = flag == "--data" || flag == "--epochs" || flag == "--max-steps" || flag == "--batch" ||
                       flag == "--lr" || flag == "--save";
    if (!known) {
      std::fprintf(stderr, "train_fashion_mnist: unknown option %s\n%s", flag.c_str(), usage);
      return 2;
    }
    if (a + 1 >= argc) {
      std::fprintf(stderr, "train_fashion_mnist: %s needs a value\n%s", flag.c_str(), usage);
      return 2;
    }
    const std::string value = argv[a + 1];
    bool ok = true;
    if (flag == "--data") dataDir = value;
    else if (flag == "--epochs") ok = count(value, &epochs);
    else if (flag == "--max-steps") ok = count(value, &maxSteps);
    else if (flag == "--batch") ok = count(value, &batch);
    else if (flag == "--lr") ok = positive(value, &lr);
    else save = value;
    if (!ok) {
      std::fprintf(stderr, "train_fashion_mnist: bad value '%s' for %s\n%s", value.c_str(), flag.c_str(), usage);
      return 2;
    }
  }
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    std::fprintf(stderr, "init: %s\n", weftGetLastError(nullptr));
    return 1;
  }
  int rank = 0, nranks = 1;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &nranks);
  try {
    torch::set_num_threads(1);  // one core per rank
    torch::manual_seed(1 + rank);  // different initial weights: the broadcast must make them equal
    const Data train = load(dataDir, "train"), test = load(dataDir, "t10k");
    auto model = makeModel();
    weft::ddp::TorchDDP ddp(comm, *model);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
    weft::ddp::DistributedSampler sampler(static_cast<size_t>(train.images.size(0)), nranks, rank, true, 42);
    long step = 0;
    for (long epoch = 0; epoch < epochs; ++epoch) {
      sampler.setEpoch(static_cast<uint64_t>(epoch));
      const auto indices = sampler.indices();
      model->train();
      double lossSum = 0;
      long lossCount = 0;
      for (size_t at = 0; at < indices.size() && (maxSteps < 0 || step < maxSteps); at += static_cast<size_t>(batch), ++step) {
        const size_t end = std::min(indices.size(), at + static_cast<size_t>(batch));
        ddp.syncBuffers();
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(batchOf(train.images, indices, at, end)),
                                                         batchOf(train.labels, indices, at, end));
        loss.backward();
        ddp.finish();
        optimizer.step();
        lossSum += loss.item<double>();
        ++lossCount;
        if (step % 50 == 49) {
          double mean[1] = {lossSum / lossCount};
          check(weftAllReduce(mean, mean, 1, weftFloat64, weftAvg, comm, nullptr), comm, "averaging the loss");
          if (rank == 0) std::printf("epoch %ld step %ld: loss %.4f (mean over ranks)\n", epoch + 1, step + 1, mean[0]);
          std::fflush(stdout);
          lossSum = 0;
          lossCount = 0;
        }
      }
    }
    // Every rank scores its shard of the test set; the counts are summed.
    model->eval();
    torch::NoGradGuard noGrad;
    weft::ddp::DistributedSampler testShard(static_cast<size_t>(test.images.size(0)), nranks, rank, false, 0, true);
    const auto ids = testShard.indices();
    int64_t counts[2] = {0, static_cast<int64_t>(ids.size())};
    for (size_t at = 0; at < ids.size(); at += 1000) {
      const size_t end = std::min(ids.size(), at + 1000);
      auto predicted = model->forward(batchOf(test.images, ids, at, end)).argmax(1);
      counts[0] += predicted.eq(batchOf(test.labels, ids, at, end)).sum().item<int64_t>();
    }
    check(weftAllReduce(counts, counts, 2, weftInt64, weftSum, comm, nullptr), comm, "summing the test counts");
    // Every rank's weights must still be identical: compare a checksum of them.
    double sums[2] = {0, 0};
    for (const auto& p : model->parameters()) sums[0] += p.sum().item<double>();
    sums[1] = -sums[0];
    check(weftAllReduce(sums, sums, 2, weftFloat64, weftMax, comm, nullptr), comm, "comparing weights");
    if (rank == 0) {
      std::printf("test accuracy: %.2f%% (%lld of %lld) after %ld steps on %d ranks; weights equal on every rank: %s\n",
                  100.0 * static_cast<double>(counts[0]) / static_cast<double>(counts[1]),
                  static_cast<long long>(counts[0]), static_cast<long long>(counts[1]), step, nranks,
                  sums[0] == -sums[1] ? "yes" : "NO");
      torch::save(model, save);
    }
    check(weftBarrier(comm, nullptr), comm, "the final barrier");
    weftCommDestroy(comm);
    return sums[0] == -sums[1] ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    weftCommAbort(comm);
    return 1;
  }
}
