// RUN: not smelt-opt %s 2>&1 | filecheck %s

// A #graph.dims expression that is not one: floordiv by a symbol.
func.func @f(%x: tensor<?xf32, #graph.dims<"H floordiv W">>) {
  func.return
}
// CHECK: #graph.dims: 'H floordiv W': floordiv needs a nonzero number
