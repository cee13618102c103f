#include "kiln/models/classifiers.h"

#include "kiln/core/error.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pool.h"

namespace kiln::models {

nn::Shared<nn::Sequential> image_mlp(const nn::Init& init, const MlpOptions& o) {
  KILN_CHECK(o.in_features > 0 && o.classes > 0, "image_mlp", "in_features and classes must be positive, got {} and {}",
             o.in_features, o.classes);
  KILN_CHECK(o.dropout >= 0 && o.dropout < 1, "image_mlp", "dropout must be in [0, 1), got {}", o.dropout);
  auto net = nn::make<nn::Sequential>();
  net->push_back(nn::Flatten());
  int64_t width = o.in_features;
  for (int64_t h : o.hidden) {
    KILN_CHECK(h > 0, "image_mlp", "hidden widths must be positive, got {}", h);
    net->push_back(nn::Linear(width, h, init));
    net->push_back(nn::ReLU());
    if (o.dropout > 0) net->push_back(nn::Dropout(o.dropout, init));
    width = h;
  }
  net->push_back(nn::Linear(width, o.classes, init));
  return net;
}

nn::Shared<nn::Sequential> image_cnn(const nn::Init& init, const CnnOptions& o) {
  KILN_CHECK(o.image_size > 0 && o.image_size % 4 == 0, "image_cnn",
             "image_size must be a positive multiple of 4 (two 2x2 poolings), got {}", o.image_size);
  KILN_CHECK(o.channels1 > 0 && o.channels2 > 0 && o.hidden > 0 && o.classes > 0, "image_cnn",
             "channels, hidden and classes must be positive");
  KILN_CHECK(o.dropout >= 0 && o.dropout < 1, "image_cnn", "dropout must be in [0, 1), got {}", o.dropout);
  auto net = nn::make<nn::Sequential>();
  int64_t in = 1;
  for (int64_t out : {o.channels1, o.channels2}) {
    net->push_back(nn::Conv2d(in, out, 3, init, {.padding = 1, .bias = false}));  // BN supplies the shift
    net->push_back(nn::BatchNorm2d(out));
    net->push_back(nn::ReLU());
    net->push_back(nn::MaxPool2d(2));
    in = out;
  }
  int64_t side = o.image_size / 4;
  net->push_back(nn::Flatten());
  if (o.dropout > 0) net->push_back(nn::Dropout(o.dropout, init));
  net->push_back(nn::Linear(o.channels2 * side * side, o.hidden, init));
  net->push_back(nn::ReLU());
  if (o.dropout > 0) net->push_back(nn::Dropout(o.dropout, init));
  net->push_back(nn::Linear(o.hidden, o.classes, init));
  return net;
}

}  // namespace kiln::models
