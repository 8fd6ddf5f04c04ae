"""rill.nn: layers, losses and parameter initialization."""
from .parameter import Parameter
from . import functional, init, utils
from .module import Module
from .containers import Sequential, ModuleList, ModuleDict
from .linear import Linear, Identity, Flatten, Embedding
from .activation import (ReLU, GELU, SiLU, Tanh, Sigmoid, LeakyReLU, ELU, Softplus, Softmax,
                         LogSoftmax, SELU, CELU, Hardsigmoid, Hardswish, Hardtanh, ReLU6, Mish,
                         Softsign, Tanhshrink, PReLU, GLU, LogSigmoid, Softmin, Threshold)
from .dropout import Dropout
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .upsampling import (Upsample, UpsamplingNearest2d, UpsamplingBilinear2d, PixelShuffle,
                         PixelUnshuffle)
from .padding import (ZeroPad1d, ZeroPad2d, ZeroPad3d, ConstantPad1d, ConstantPad2d,
                      ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                      ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, CircularPad1d,
                      CircularPad2d, CircularPad3d)
from .pooling import (MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d,
                      AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d)
from .normalization import (BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm, InstanceNorm1d,
                            InstanceNorm2d, RMSNorm, LocalResponseNorm)
from .recurrent import LSTMCell, GRUCell, LSTM, GRU, RNNCell, RNN
from .attention import MultiheadAttention
from .transformer import (TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
                          TransformerDecoder, Transformer)
from .losses import (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, HuberLoss, BCEWithLogitsLoss,
                     BCELoss, SmoothL1Loss, KLDivLoss, CosineEmbeddingLoss, MarginRankingLoss,
                     TripletMarginLoss, SoftMarginLoss, GaussianNLLLoss, PoissonNLLLoss)
