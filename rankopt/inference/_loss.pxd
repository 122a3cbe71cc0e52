# Compiled δ_j(i+1) − δ_j(i) for the loss families of rankopt.losses.KernelCode.
# The LOSS_* values mirror KernelCode; tests/inference/test_kernels.py checks it.
# j and i are 1-based as in the papers (j: order of the negative, i: its
# interleaving rank, 1 <= i <= n_pos).

cdef enum:
    LOSS_AP = 1
    LOSS_AUC = 2
    LOSS_POSITION_DISCOUNT = 3


cdef inline double delta_diff(int code, Py_ssize_t j, Py_ssize_t i,
                              Py_ssize_t n_pos, Py_ssize_t n_neg,
                              const double* table) noexcept nogil:
    if code == LOSS_AP:
        return -(<double>i) / (n_pos * (<double>(i + j - 1)) * (<double>(i + j)))
    elif code == LOSS_AUC:
        return -1.0 / ((<double>n_pos) * n_neg)
    else:  # LOSS_POSITION_DISCOUNT: table[k - 1] = D(k) / Z
        return table[i + j - 1] - table[i + j - 2]
