"""The fleet service: observe -> decide -> actuate -> record, with its store, lease, status API and
notifications.
"""
