"""Golden for the Trainer: a plain PyTorch training loop that kiln's Trainer with
the default classification step must reproduce (tests/train/trainer_test.cpp).

An MLP 6 -> 8 -> 3 in f64, Adam(lr=0.01), 22 samples in order (no shuffle),
batch 4 (the last batch of each epoch has 2), 3 epochs. Recorded: the initial
parameters, the data, every step's loss, each epoch's sample-weighted mean
loss and accuracy (predictions before each step's update, as Keras reports),
and the final parameters.
"""
import torch

from goldens.common import dump, gen, t


def generate():
    g = gen(7)
    x = torch.randn(22, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (22,), generator=g)
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).double()
    initial = {k: t(v) for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step_losses, epoch_loss, epoch_acc = [], [], []
    for _ in range(3):
        loss_sum, correct, count = 0.0, 0, 0
        for i in range(0, 22, 4):
            xb, yb = x[i:i + 4], y[i:i + 4]
            logits = model(xb)
            loss = torch.nn.functional.cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step_losses.append(loss.item())
            loss_sum += loss.item() * len(yb)
            correct += int((logits.argmax(1) == yb).sum())
            count += len(yb)
        epoch_loss.append(loss_sum / count)
        epoch_acc.append(correct / count)
    final = {k: t(v) for k, v in model.state_dict().items()}
    dump("train_loop", {"x": t(x), "y": t(y), "initial": initial, "final": final, "step_losses": step_losses,
                        "epoch_loss": epoch_loss, "epoch_accuracy": epoch_acc})
