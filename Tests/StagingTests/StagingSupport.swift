import Testing
@testable import Staging
