import Testing
@testable import Egress
