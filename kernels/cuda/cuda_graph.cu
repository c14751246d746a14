/* kernels/cuda/cuda_graph.cu — graph_begin/end/launch/free (kernels.h): the
 * ops between begin and end are captured from the backend's stream into a
 * CUDA graph, which graph_end launches once and returns; graph_launch
 * replays it with one launch instead of one per kernel. KF_CUDA_GRAPHS=0
 * turns graphs off: the ops then run as they are called and graph_end
 * returns NULL, as on the CPU backend. */
#include "kernels/cuda/cuda_internal.h"

void cu_graph_begin(kf_backend *b) {
    cuda_impl *im = cu_impl(b);
    KF_CHECK(!im->capturing, "graph_begin: already recording a graph");
    if (!im->graphs) return;
    /* global mode: an allocation or host wait anywhere fails the capture */
    CUDA_OK(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeGlobal));
    im->capturing = 1;
}

void *cu_graph_end(kf_backend *b) {
    cuda_impl *im = cu_impl(b);
    if (!im->capturing) return NULL;
    im->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(im->stream, &g);
    KF_CHECK(e == cudaSuccess,
             "graph_end: the capture failed (%s): an op between graph_begin and graph_end "
             "allocated, freed or waited for the device",
             cudaGetErrorString(e));
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaGraphLaunch(exec, im->stream)); /* the recorded ops run once now */
    im->n_graphs++;
    im->n_graph_records++;
    im->n_graph_launches++;
    return (void *)exec;
}

void cu_graph_launch(kf_backend *b, void *graph) {
    KF_CHECK(graph, "graph_launch: no graph (graph_end returned NULL)");
    CUDA_OK(cudaGraphLaunch((cudaGraphExec_t)graph, cu_stream(b)));
    cu_impl(b)->n_graph_launches++;
}

void cu_graph_free(kf_backend *b, void *graph) {
    if (!graph) return;
    CUDA_OK(cudaGraphExecDestroy((cudaGraphExec_t)graph)); /* one in flight completes first */
    cu_impl(b)->n_graphs--;
}
