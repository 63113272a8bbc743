// A kernel may say what its calls prepare from encodings, shapes and static inputs alone (a
// table of codes, coefficients), so it is done once ahead of the calls: beside `<Op>(...)` in
// kernels/<Op>.h, an `inline void <Op>Prepare(...)` taking the same arguments. QHPI packages run
// it in the HTP's precompute hook, once per op instance when a graph is loaded; the Hexagon check
// counts its packets apart from the call's. A kernel without one prepares nothing ahead.
#ifndef QCO_PREPARE_H_
#define QCO_PREPARE_H_

// Defines qco_prepare_<Op>(0, args...) in the kernel's namespace: <Op>Prepare(args...) when the
// kernel declares it (found by the unqualified call), else nothing; true when it ran.
#define QCO_PREPARE_HOOK(OP)                                                                   \
  template <typename... Views>                                                                 \
  auto qco_prepare_##OP(int, Views&... views)->decltype(OP##Prepare(views...), bool()) {       \
    OP##Prepare(views...);                                                                     \
    return true;                                                                               \
  }                                                                                            \
  template <typename... Views>                                                                 \
  bool qco_prepare_##OP(long, Views&...) {                                                     \
    return false;                                                                              \
  }

#endif  // QCO_PREPARE_H_
