"""The posts' final ``CNNClassifier``, transcribed verbatim.

Deviations from the posts, each marked ``DEVIATION`` below, and only these:
1. ``forward`` calls ``self.last(x)``: the posts build it but forget to call it.
2. The first decoder width: the posts hard-code ``32 * 28 * 28``, but with
   ``enc_sizes=[32, 64]`` the encoder outputs ``64 * 28 * 28`` features, so the
   posts' own ``CNNClassifier(1, [32, 64], [1024], 10)`` fails in ``forward``
   (mat1 and mat2 shapes cannot be multiplied (2x50176 and 25088x1024)); it
   is ``self.enc_sizes[-1] * 28 * 28`` here (32 * 28 * 28 for enc_sizes ending in 32).
3. ``n_classes=10`` has a default, so ``CNNClassifier(1, [32, 64], [1024])``
   (as issue 12 writes it) runs; the posts require the argument.
"""

from torch import nn


def conv_block(in_f, out_f, *args, **kwargs):
    return nn.Sequential(
        nn.Conv2d(in_f, out_f, *args, **kwargs),
        nn.BatchNorm2d(out_f),
        nn.ReLU()
    )

def dec_block(in_f, out_f):
    return nn.Sequential(
        nn.Linear(in_f, out_f),
        nn.ReLU()
    )

class CNNClassifier(nn.Module):
    def __init__(self, in_c, enc_sizes, dec_sizes,  n_classes=10):  # DEVIATION 3: default n_classes
        super().__init__()
        self.enc_sizes = [in_c, *enc_sizes]
        self.dec_sizes = [self.enc_sizes[-1] * 28 * 28, *dec_sizes]  # DEVIATION 2: posts: 32 * 28 * 28

        conv_blokcs = [conv_block(in_f, out_f, kernel_size=3, padding=1)
                       for in_f, out_f in zip(self.enc_sizes, self.enc_sizes[1:])]

        self.encoder = nn.Sequential(*conv_blokcs)

        dec_blocks = [dec_block(in_f, out_f)
                       for in_f, out_f in zip(self.dec_sizes, self.dec_sizes[1:])]

        self.decoder = nn.Sequential(*dec_blocks)

        self.last = nn.Linear(self.dec_sizes[-1], n_classes)

    def forward(self, x):
        x = self.encoder(x)
        x = x.view(x.size(0), -1) # flat
        x = self.decoder(x)
        x = self.last(x)  # DEVIATION 1: the posts forget to call self.last
        return x
