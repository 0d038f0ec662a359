"""What several benchmark families share: the child-process harness and result line
(common), the event loop the commands use (loop), the demo's files (demo), a flow
run by ``mediaflow run`` as a child (flow_process), the Redis side channel
(redis_tools), one sample of a running process (sample), one look at a running
flow through its API and metrics (look), each thread's CPU (threads), a
playlist's date-time (hls).
"""
