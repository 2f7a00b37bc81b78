# scripts/kit/provided.sh: what a GPU machine provides itself, so the GPU kit carries none
# of it (scripts/gpu-kit) and a file from there is no fault (run.sh): glibc, the C++
# runtime (newer there; an older copy first on the path would break PyTorch in the same
# process) and NVIDIA's libraries. Sourced by both; one list.
provided_lib() { # NAME (a file name, no folder)
    case $1 in
        ld-linux* | linux-vdso* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
        libresolv.so.* | libutil.so.* | libstdc++.so.* | libgcc_s.so.* | \
        libcuda.so* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnvidia-*.so* | \
        libnccl.so.* | libnvrtc*.so* | libnvJitLink*.so*) return 0 ;;
    esac
    return 1
}
