"""The graph dialect: ONNX-like tensor ops with value semantics, on tensors of static
shapes or of symbolic dims (`?` dims named by a `#graph.dims` encoding, whose
expressions are `symbolic.Dim`s).

Every op knows how to infer its result types from its operand types and attributes
(`infer`); the verifier checks the result types against that inference, and the
builder `Op.build(operands, **attrs)` uses it, so the frontend and the passes never
compute a shape by hand. Attributes are builtin attributes, readable with `attrs()`.
"""

from xdsl.ir import Dialect

from smelt.dialects import dtypes  # noqa: F401  (graph.dtypes is used by passes)
from smelt.dialects.graph_base import *
from smelt.dialects.graph_data import *
from smelt.dialects.graph_elementwise import *
from smelt.dialects.graph_fused import *
from smelt.dialects.graph_index import *
from smelt.dialects.graph_loop import *
from smelt.dialects.graph_nn import *
from smelt.dialects.graph_rnn import *
from smelt.dialects.graph_scan import *

Graph = Dialect(
    "graph",
    [
        ReluOp,
        SigmoidOp,
        TanhOp,
        ExpOp,
        LogOp,
        ErfOp,
        SqrtOp,
        NegOp,
        AbsOp,
        ReciprocalOp,
        FloorOp,
        CeilOp,
        IdentityOp,
        DropoutOp,
        SignOp,
        RoundOp,
        SinOp,
        CosOp,
        TanOp,
        AsinOp,
        AcosOp,
        AtanOp,
        SinhOp,
        CoshOp,
        AsinhOp,
        AcoshOp,
        AtanhOp,
        NotOp,
        IsNanOp,
        IsInfOp,
        LeakyReluOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        PowOp,
        MaxOp,
        MinOp,
        EqualOp,
        LessOp,
        GreaterOp,
        LessEqualOp,
        GreaterEqualOp,
        AndOp,
        OrOp,
        XorOp,
        ShiftLeftOp,
        ShiftRightOp,
        PreluOp,
        ModOp,
        CastOp,
        ClipOp,
        WhereOp,
        ReduceSumOp,
        ReduceMeanOp,
        ReduceMaxOp,
        ReduceMinOp,
        ReduceProdOp,
        SoftmaxOp,
        LogSoftmaxOp,
        HardmaxOp,
        ArgMaxOp,
        ArgMinOp,
        CumSumOp,
        CumProdOp,
        TopKOp,
        LstmScanOp,
        GruScanOp,
        RnnScanOp,
        LayerNormOp,
        BatchNormOp,
        LrnOp,
        ReshapeOp,
        BitcastOp,
        ExpandOp,
        TransposeOp,
        ConcatOp,
        SplitOp,
        SliceOp,
        GatherOp,
        GatherElementsOp,
        GatherNDOp,
        ScatterElementsOp,
        ScatterNDOp,
        TriluOp,
        OneHotOp,
        ReverseSequenceOp,
        PadOp,
        Conv2dOp,
        MaxPoolOp,
        AveragePoolOp,
        MaxPoolWithIndicesOp,
        GlobalAveragePoolOp,
        MatMulOp,
        GemmOp,
        ConstantOp,
        FusedOp,
        YieldOp,
        LoopOp,
    ],
    [DimsAttr],
)
