"""What several benchmark families share: the child-process harness and result line
(common), a flow run by ``mediaflow run`` as a child (flow_process), the Redis side
channel (redis_tools), one sample of a running process (sample).
"""
