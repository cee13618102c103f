// Uses an installed kiln: y = sum(x * x), dy/dx = 2x; the gradient survives a
// safetensors round trip (links the io layer from the install tree).
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  kiln::Tensor x = kiln::tensor({1.0f, 2.0f, 3.0f});
  x.requires_grad_();
  kiln::Tensor y = kiln::sum(x * x);
  y.backward();
  auto g = x.grad().to_vector<float>();
  std::printf("consumer: y=%g grad=[%g, %g, %g]\n", y.item<float>(), g[0], g[1], g[2]);
  kiln::io::save_safetensors("consumer.safetensors", {{"grad", x.grad()}});
  auto back = kiln::io::load_safetensors("consumer.safetensors").at("grad").to_vector<float>();
  bool ok = y.item<float>() == 14.0f && g[0] == 2.0f && g[1] == 4.0f && g[2] == 6.0f && back == g;
  return ok ? 0 : 1;
}
