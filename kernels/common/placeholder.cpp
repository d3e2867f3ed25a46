// Anchors the kernels library when a folder has no sources of its own yet.
namespace skew {
int kernels_placeholder_anchor = 0;
}
